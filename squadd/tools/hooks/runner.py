"""`Hooks`: runs the hooks of an event as Claude Code does, and says what they decided.

Every matching hook of an event runs at once (the same command only once), each as `bash -c`
in the OS sandbox its session's tool calls get, through the one process runner with its
timeout, its JSON on stdin, `CLAUDE_PROJECT_DIR` in its environment. Their answers are
combined: any deny wins, then ask, then allow; additional context is joined; the last
`updatedInput` given is taken. A hook that cannot start, crashes or times out is logged and
decides nothing, unless `hooks.fail_closed` makes it a denial.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from squadd.config import Settings
from squadd.errors import ConfigError, SandboxError, SquaddError
from squadd.procs import Command, Waitable, run_group
from squadd.sandbox import Confined, confine
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout
from squadd.tools.commands.environment import command_environment
from squadd.tools.hooks.config import CommandHook, HookEvent, HooksSource, MatcherGroup
from squadd.tools.hooks.wire import Decision, HookReply, read_reply

log = structlog.get_logger("squadd.hooks")

SHELL = shutil.which("bash") or "/bin/sh"
"""What a hook's command line runs in (Claude Code runs them with bash)."""


@dataclass(frozen=True)
class HookSession:
    """The session an event belongs to, as every hook's input names it."""

    session_id: str
    agent: str
    cwd: Path
    """Where the hook runs: the session's workspace."""


@dataclass(frozen=True)
class Verdict:
    """What the hooks of one event decided together (no hook: nothing)."""

    decision: Decision | None = None
    reason: str = ""
    updated_input: dict[str, Any] | None = None
    context: str = ""
    ran: int = 0

    @property
    def blocked(self) -> bool:
        return self.decision == "deny"


NOTHING = Verdict()


class _Capped:
    """A `ByteSink` that keeps the first `limit` bytes and drops the rest."""

    def __init__(self, limit: int):
        self.limit = limit
        self.data = bytearray()

    async def write(self, data: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data += data[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class Hooks:
    """The hooks of one squad: `fire(event, ...)` runs those that match."""

    def __init__(self, layout: SquadLayout, settings: Settings):
        self.layout = layout
        self.settings = settings.hooks
        self.environment_settings = settings
        self.source = HooksSource(layout, import_claude=self.settings.import_claude)

    def transcript_path(self, session_id: str) -> str:
        try:
            return str(self.layout.transcript(session_id))
        except SquaddError:
            return ""

    def session(self, session_id: str, agent: str, cwd: Path | None) -> HookSession:
        return HookSession(session_id, agent, cwd or self.layout.repo)

    async def _groups(self, event: HookEvent) -> list[MatcherGroup] | str:
        """The event's matcher groups (the files read in a thread only when they changed), or
        why they cannot be known (a broken file)."""
        try:
            try:
                return self.source.known_groups(event)
            except NotCached:
                return await anyio.to_thread.run_sync(self.source.groups, event)
        except (ConfigError, OSError) as exc:
            log.warning("hooks not read", hook_event=event, error=str(exc))
            return str(exc)

    def hook_command(self, event: HookEvent, hook: CommandHook, session: HookSession,
                     payload: bytes) -> Command:
        """The process a hook runs as: the one place its argv, working folder and environment
        are made (`_confine` wraps it in the sandbox)."""
        env = command_environment(self.environment_settings, os.environ)
        env["CLAUDE_PROJECT_DIR"] = str(self.layout.repo)
        env["SQUADD_HOOK_EVENT"] = event
        cwd = session.cwd if session.cwd.is_dir() else self.layout.repo
        return Command(argv=[SHELL, "-c", hook.command], cwd=cwd, env=env, stdin=payload)

    def _confine(self, command: Command, session: HookSession) -> Confined:
        """`command` wrapped in the OS sandbox a tool call of the session's agent gets (its
        workspace writable, its network; `[sandbox]`, docs/sandbox.md). Blocking: it reads the
        charter and may make a cgroup."""
        # Imported here: the sandbox's policy reads charters through the state layer.
        from squadd.tools.sandboxing import policy_for

        policy = policy_for(self.environment_settings, agent=session.agent,
                            workspace=command.cwd or self.layout.repo, repo=self.layout.repo,
                            squad_dir=self.layout.root)
        return confine(policy, command.argv, command.env or {})

    async def matching(self, event: HookEvent, match: str | None = None
                       ) -> list[CommandHook] | Verdict:
        """The hooks of `event` whose matcher takes `match` (None: every hook of the event,
        whose matchers Claude Code ignores), each command once; or, when the files cannot be
        read, the verdict that stands for them. Cheap when there are none (a `stat`): callers
        ask before they build an event's input."""
        groups = await self._groups(event)
        if isinstance(groups, str):
            if self.settings.fail_closed:
                return Verdict("deny", f"the hooks cannot be read ({groups}); "
                                       "hooks.fail_closed blocks until they can")
            return NOTHING
        hooks: list[CommandHook] = []
        seen: set[str] = set()
        for group in groups:
            if match is not None and not group.matches(match):
                continue
            for hook in group.hooks:
                if hook.command not in seen:
                    seen.add(hook.command)
                    hooks.append(hook)
        return hooks

    async def fire(self, event: HookEvent, session: HookSession, fields: Mapping[str, Any],
                   *, match: str | None = None, cancel: Waitable | None = None) -> Verdict:
        """Run the hooks of `event` that take `match` (see `matching`); their verdict."""
        found = await self.matching(event, match)
        if isinstance(found, Verdict):
            return found
        return await self.run(event, found, session, fields, cancel=cancel)

    async def run(self, event: HookEvent, hooks: list[CommandHook], session: HookSession,
                  fields: Mapping[str, Any], *, cancel: Waitable | None = None) -> Verdict:
        """Run `hooks` at once with the event's input and combine their answers."""
        if not hooks:
            return NOTHING
        payload = json.dumps({
            "session_id": session.session_id,
            "transcript_path": self.transcript_path(session.session_id),
            "cwd": str(session.cwd), "hook_event_name": event, "permission_mode": "default",
            **fields}, default=str).encode()
        replies: list[HookReply | None] = [None] * len(hooks)

        async def run(index: int, hook: CommandHook) -> None:
            replies[index] = await self._run(event, hook, session, payload, cancel)

        async with anyio.create_task_group() as tasks:
            for index, hook in enumerate(hooks):
                tasks.start_soon(run, index, hook)
        return self._combine(event, hooks, [r for r in replies if r is not None])

    async def _run(self, event: HookEvent, hook: CommandHook, session: HookSession,
                   payload: bytes, cancel: Waitable | None) -> HookReply:
        timeout = hook.timeout_s or self.settings.timeout_s
        out, err = _Capped(self.settings.max_output_bytes), _Capped(self.settings.max_output_bytes)
        command = self.hook_command(event, hook, session, payload)
        try:
            confined = await anyio.to_thread.run_sync(self._confine, command, session)
        except (SandboxError, OSError) as exc:
            return HookReply(None, "", "", failed=f"could not start in the sandbox: {exc}")
        try:
            outcome = await run_group(
                dataclasses.replace(command, argv=confined.argv, env=confined.env), out, err,
                deadline=anyio.current_time() + timeout, cancel=cancel)
        except OSError as exc:
            return HookReply(None, "", "", failed=f"could not start: {exc}")
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(confined.close)
        if outcome.timed_out:
            return HookReply(None, out.text(), err.text(), failed=f"timed out after {timeout:g}s")
        if outcome.cancelled:
            return HookReply(None, out.text(), err.text(), failed="cancelled")
        return read_reply(event, outcome.exit_code, out.text(), err.text())

    def _combine(self, event: HookEvent, hooks: list[CommandHook],
                 replies: list[HookReply]) -> Verdict:
        denials: list[str] = []
        asks: list[str] = []
        allowed = False
        updated: dict[str, Any] | None = None
        context: list[str] = []
        for hook, reply in zip(hooks, replies, strict=True):
            log.info("hook ran", hook_event=event, command=hook.command[:200],
                     exit_code=reply.exit_code, decision=reply.decision, failed=reply.failed)
            if reply.failed is not None:
                log.warning("hook failed", hook_event=event, command=hook.command[:200],
                            where=hook.source, error=reply.failed)
                if self.settings.fail_closed:
                    denials.append(f"the hook {hook.command!r} {reply.failed} "
                                   "(hooks.fail_closed)")
                continue
            if reply.stop is not None:
                denials.append(reply.stop)
            if reply.decision == "deny":
                denials.append(reply.reason or f"blocked by the hook {hook.command!r}")
            elif reply.decision == "ask":
                asks.append(reply.reason)
            elif reply.decision == "allow":
                allowed = True
            if reply.updated_input is not None and reply.decision != "deny":
                updated = reply.updated_input
            if reply.context:
                context.append(reply.context)
        joined = "\n".join(context)
        if denials:
            return Verdict("deny", "\n".join(denials), None, joined, len(hooks))
        if asks:
            return Verdict("ask", "\n".join(a for a in asks if a), updated, joined, len(hooks))
        return Verdict("allow" if allowed else None, "", updated, joined, len(hooks))
