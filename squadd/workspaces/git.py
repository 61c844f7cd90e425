"""Running git (and a workspace's setup and check commands) through the one process runner.

Every command runs in its own process group with a hard deadline (`commands.process.run_command`),
so a hung git or test suite never outlives its timeout. Git runs with a fixed locale, no pager,
no prompt and no editor, so its output can be read and it never waits on a terminal; and with
`squadd.gitsafe`'s overrides, so it never runs a hook, filter or driver the repository chose.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from squadd import gitsafe
from squadd.errors import WorkspaceError
from squadd.sandbox import SandboxPolicy
from squadd.tools.base import CancelSignal
from squadd.tools.commands.output import OutputSink
from squadd.tools.commands.process import Command, run_command

GIT_OUTPUT_BYTES = 4 << 20
"""Most bytes of one git command's output kept (in memory: git's answers here are short)."""
TAIL_BYTES = 4000
"""Bytes of a failed command's output quoted in a result."""


@dataclass(frozen=True)
class Ran:
    """A finished command: its exit code (None: it timed out or could not start) and output."""

    argv: tuple[str, ...]
    exit_code: int | None
    output: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def tail(self) -> str:
        return self.output[-TAIL_BYTES:]

    def error(self, what: str) -> WorkspaceError:
        how = "timed out" if self.timed_out else f"exited {self.exit_code}"
        return WorkspaceError(f"{what}: `{' '.join(self.argv)}` {how}: {self.tail.strip()}")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: the daemon's, without anything that redirects git or
    names a program for it (the config overrides are added per command: `Git.ran`)."""
    env = gitsafe.hardened_env(os.environ)
    env.update(LC_ALL="C", LANG="C", GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true",
               GIT_PAGER="cat", GIT_OPTIONAL_LOCKS="0")
    env.update(extra or {})
    return env


async def run(argv: Sequence[str], cwd: Path, *, timeout_s: float,
              env: Mapping[str, str] | None = None, spill: Path | None = None,
              sandbox: SandboxPolicy | None = None) -> Ran:
    """Run `argv` in `cwd` until it ends or `timeout_s` passes; with `spill`, its whole output
    also goes to that file (and the result keeps the last `TAIL_BYTES` of it). With `sandbox`
    (the land check: agent-written code) it runs confined (`SandboxError` when it cannot)."""
    sink = OutputSink(spill or cwd / ".unused", {}, GIT_OUTPUT_BYTES)
    if spill is not None:
        await sink.open()
    try:
        outcome = await run_command(
            Command(tuple(argv), cwd, dict(env) if env is not None else git_env()), sink,
            deadline=anyio.current_time() + timeout_s, cancel=CancelSignal(), sandbox=sandbox)
    finally:
        await sink.close()
    if spill is not None and not sink.complete:
        text = await anyio.to_thread.run_sync(_read_tail, spill)
    else:
        text = sink.head_text()
    return Ran(tuple(argv), outcome.exit_code, text, outcome.timed_out)


def _read_tail(path: Path) -> str:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - TAIL_BYTES))
        return handle.read().decode("utf-8", errors="replace")


class Git:
    """git in one repository (or worktree), with one timeout per command."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s

    async def ran(self, cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> Ran:
        """`git ARGS` in `cwd`, with every driver the config there defines switched off (the
        keys are read first, since a filter's or a merge driver's name is the config's own;
        not for a command that never runs one)."""
        defined: list[str] = []
        if gitsafe.needs_drivers(args):
            listed = await run(("git", *gitsafe.LIST_CONFIG), cwd, timeout_s=self.timeout_s,
                               env=git_env())
            defined = gitsafe.parse_listed(listed.output) if listed.ok else []
        return await run(gitsafe.hardened_argv(("git", *args)), cwd, timeout_s=self.timeout_s,
                         env=gitsafe.hardened_env(git_env(env), defined))

    async def out(self, cwd: Path, *args: str, what: str = "git failed",
                  env: Mapping[str, str] | None = None) -> str:
        """The output of a git command that must succeed (else `WorkspaceError`)."""
        result = await self.ran(cwd, *args, env=env)
        if not result.ok:
            raise result.error(what)
        return result.output.strip()

    async def rev(self, cwd: Path, ref: str) -> str | None:
        """The commit `ref` names, or None when it names none."""
        result = await self.ran(cwd, "rev-parse", "--verify", "--quiet", ref + "^{commit}")
        return result.output.strip() if result.ok and result.output.strip() else None
