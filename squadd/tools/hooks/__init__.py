"""Hooks in Claude Code's format and wire protocol: the squad's `.squad/hooks.json` (and the
project's `.claude/settings.json`), run around tool calls, sessions and landings."""

from squadd.errors import HooksFileError
from squadd.tools.hooks.config import EVENTS, HookEvent
from squadd.tools.hooks.runner import Hooks, HookSession, Verdict

__all__ = ["EVENTS", "HookEvent", "HookSession", "Hooks", "HooksFileError", "Verdict"]
