"""Which hooks a squad has: `.squad/hooks.json` (and, with `hooks.import_claude`, the hooks of
the project's `.claude/settings.json`), in Claude Code's format::

    {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "./check.sh", "timeout": 30}]}]}}

A file is read again when it changes (one `stat` a look otherwise; a missing one is looked for
once a second). A file that cannot be used is an error that names the file, the place in it
and what to write instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from squadd.errors import HooksFileError, UntrustedInputError
from squadd.statcache import Absences, StatCache
from squadd.state.layout import SquadLayout
from squadd.untrusted import linear_pattern, parse_json

HookEvent = Literal["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop",
                    "SubagentStart", "SubagentStop", "Notification", "PreLand", "PostLand"]
EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
MAX_HOOKS_FILE_BYTES = 1_048_576
_PLAIN_MATCHER = re.compile(r"^[A-Za-z0-9_|]+$")


@dataclass(frozen=True)
class CommandHook:
    """One `{"type": "command", "command": ..., "timeout": ...}` entry."""

    command: str
    timeout_s: float | None
    source: str
    """Where it was written: `.squad/hooks.json` or `.claude/settings.json`, and the place."""


@dataclass(frozen=True)
class MatcherGroup:
    matcher: str
    hooks: tuple[CommandHook, ...]

    def matches(self, value: str) -> bool:
        """Claude Code's rule: empty or `*` matches everything; a plain name (or names joined
        by `|`) matches exactly; anything else is a regular expression searched in `value`."""
        if self.matcher in ("", "*"):
            return True
        if _PLAIN_MATCHER.fullmatch(self.matcher):
            return value in self.matcher.split("|")
        return linear_pattern(self.matcher).search(value)


@dataclass(frozen=True)
class HooksFile:
    """The hooks of one file, by event; `ignored` says what squadd does not run, and why."""

    events: dict[HookEvent, tuple[MatcherGroup, ...]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()


def parse_hooks(text: str, where: str, *, hooks_required: bool) -> HooksFile:
    """The hooks `text` (a JSON document) holds; `HooksFileError` naming `where` when it cannot
    be used. Events and hook types squadd does not run are listed in `ignored`, not refused:
    a file written for Claude Code may hold more than squadd runs."""
    try:
        document = parse_json(text)
    except UntrustedInputError as exc:
        raise HooksFileError(f"{where} is not valid JSON: {exc}", source=where) from None
    if not isinstance(document, dict):
        raise HooksFileError(f'{where} must hold a JSON object like {{"hooks": {{...}}}}',
                             source=where)
    table = document.get("hooks")
    if table is None and not hooks_required:
        return HooksFile()
    if not isinstance(table, dict):
        raise HooksFileError(f'{where}: "hooks" must be an object of events, e.g. '
                             '{"hooks": {"PreToolUse": [...]}}', key="hooks", source=where)
    events: dict[HookEvent, tuple[MatcherGroup, ...]] = {}
    ignored: list[str] = []
    for event, groups in table.items():
        if event not in EVENTS:
            ignored.append(f"{where}: event {event!r} is not one squadd fires "
                           f"({', '.join(EVENTS)})")
            continue
        if not isinstance(groups, list):
            raise HooksFileError(f"{where}: hooks.{event} must be a list of "
                                 '{"matcher": ..., "hooks": [...]} objects',
                                 key=f"hooks.{event}", source=where)
        events[event] = tuple(_group(group, f"hooks.{event}[{n}]", where, ignored)
                              for n, group in enumerate(groups))
    return HooksFile(events, tuple(ignored))


def _group(group: Any, place: str, where: str, ignored: list[str]) -> MatcherGroup:
    if not isinstance(group, dict):
        raise HooksFileError(f'{where}: {place} must be an object {{"matcher": ..., '
                             '"hooks": [...]}}', key=place, source=where)
    matcher = group.get("matcher", "")
    if not isinstance(matcher, str):
        raise HooksFileError(f"{where}: {place}.matcher must be a string such as \"Bash\" or "
                             f"\"Edit|Write\", not {matcher!r}", key=f"{place}.matcher",
                             source=where)
    if matcher not in ("", "*") and not _PLAIN_MATCHER.fullmatch(matcher):
        try:
            linear_pattern(matcher)
        except UntrustedInputError as exc:
            raise HooksFileError(f"{where}: {place}.matcher: {exc}", key=f"{place}.matcher",
                                 source=where) from None
    entries = group.get("hooks")
    if not isinstance(entries, list):
        raise HooksFileError(f'{where}: {place}.hooks must be a list of {{"type": "command", '
                             '"command": ...}} objects', key=f"{place}.hooks", source=where)
    hooks: list[CommandHook] = []
    for n, entry in enumerate(entries):
        spot = f"{place}.hooks[{n}]"
        if not isinstance(entry, dict):
            raise HooksFileError(f'{where}: {spot} must be an object {{"type": "command", '
                                 '"command": ...}}', key=spot, source=where)
        kind = entry.get("type", "command")
        if kind != "command":
            ignored.append(f"{where}: {spot} has type {kind!r}; squadd runs \"command\" hooks "
                           "only")
            continue
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise HooksFileError(f"{where}: {spot}.command must be a shell command line",
                                 key=f"{spot}.command", source=where)
        timeout = entry.get("timeout")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, int | float) or timeout <= 0):
            raise HooksFileError(f"{where}: {spot}.timeout must be a number of seconds above "
                                 f"0, not {timeout!r}", key=f"{spot}.timeout", source=where)
        hooks.append(CommandHook(command, None if timeout is None else float(timeout),
                                 f"{where} {spot}"))
    return MatcherGroup(matcher, tuple(hooks))


def _load(path: Path, layout: SquadLayout, where: str, hooks_required: bool) -> HooksFile:
    from squadd.state.layout import read_inside

    data = read_inside(path, layout.repo, max_bytes=MAX_HOOKS_FILE_BYTES)
    if len(data) > MAX_HOOKS_FILE_BYTES:
        raise HooksFileError(f"{where} is over {MAX_HOOKS_FILE_BYTES} bytes: not read",
                             source=where)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HooksFileError(f"{where} is not UTF-8 text: {exc}", source=where) from None
    return parse_hooks(text, where, hooks_required=hooks_required)


class HooksSource:
    """The hooks configured now, from each file read again only when it changed."""

    def __init__(self, layout: SquadLayout, *, import_claude: bool,
                 clock: Callable[[], float] = time.monotonic):
        self.layout = layout
        self.import_claude = import_claude
        self._squad: StatCache[HooksFile] = StatCache(
            lambda path: _load(path, layout, ".squad/hooks.json", True), limit=1)
        self._claude: StatCache[HooksFile] = StatCache(
            lambda path: _load(path, layout, ".claude/settings.json", False), limit=1)
        self._absent = Absences(clock)
        """Hooks files found missing (each tool call and session asks; a file that appears
        is run from then on)."""
        self._paths: tuple[Path, Path] | None = None
        """The two files' paths, checked once (every tool call looks at them)."""

    def files(self) -> list[HooksFile]:
        """The hooks of each file there is (blocking: it stats, and reads a changed file);
        `HooksFileError` (or `OSError`) when one cannot be used."""
        return self._each(StatCache.get)

    def known_files(self) -> list[HooksFile]:
        """`files` from what was read before: it only stats (the event loop may call it), and
        raises `NotCached` where a file must be read."""
        return self._each(StatCache.peek)

    def groups(self, event: HookEvent) -> list[MatcherGroup]:
        """Every matcher group of `event`, the squad's file first (as `files`)."""
        return [group for hooks in self.files() for group in hooks.events.get(event, ())]

    def known_groups(self, event: HookEvent) -> list[MatcherGroup]:
        """`groups` from what was read before (as `known_files`)."""
        return [group for hooks in self.known_files() for group in hooks.events.get(event, ())]

    def _each(self, read: Callable[[StatCache[HooksFile], Path], HooksFile]
              ) -> list[HooksFile]:
        if self._paths is None:
            self._paths = (self.layout.hooks_json, self.layout.claude_settings)
        squad, claude = self._paths
        found = [self._read(self._squad, squad, read)]
        if self.import_claude:
            found.append(self._read(self._claude, claude, read))
        return [hooks for hooks in found if hooks is not None]

    def _read(self, cache: StatCache[HooksFile], path: Path,
              read: Callable[[StatCache[HooksFile], Path], HooksFile]) -> HooksFile | None:
        if not len(cache):  # nothing read: most squads have no hooks file; a stat a second says
            if self._absent.known_missing(path):
                return None
            try:
                path.stat()
            except FileNotFoundError:
                self._absent.missing(path)
                return None
        try:
            return read(cache, path)
        except FileNotFoundError:
            return None
