"""The live half of `squadd demo`: a real `squadd serve` child process on the replay provider,
one route to the lead while the daemon's event stream is narrated, and the wait for the Scribe.

`DemoDaemon` always stops what it started (graceful shutdown, then SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from squadd.cli._report import one_line
from squadd.daemon.client import AsyncDaemonClient, DaemonClient
from squadd.errors import DaemonError
from squadd.fsio import open_private
from squadd.state.layout import SquadLayout

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
KILL_WAIT_S = 5.0
ROUTE_TIMEOUT_S = 120.0
SCRIBE_TIMEOUT_S = 15.0
QUIET_S = 0.5
"""The event stream is done once it has been silent this long after the run."""
QUIET_LIMIT_S = 5.0
EVENT_BUFFER = 4096
"""Events held between the stream and the (paced) narration."""
TRANSIENT_STATES = frozenset({"queued", "creating"})
"""States the status line is not reprinted for: the next one follows at once."""
AGENT_COLORS = ("cyan", "magenta", "yellow", "green", "blue")


class DemoDaemon:
    """`python -m squadd serve --provider replay` for one repo, with its console output in the
    log folder. Use it as a context manager: leaving the block always stops the daemon."""

    def __init__(self, layout: SquadLayout, recording: Path, output: Path, *,
                 ui: bool = False):
        self.layout = layout
        self.recording = recording
        self.output = output
        self.ui = ui
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> DemoDaemon:
        command = [sys.executable, "-m", "squadd", "serve", "--dir", str(self.layout.repo),
                   "--provider", "replay", "--replay-file", str(self.recording),
                   "--log-level", "warning", *(["--ui"] if self.ui else [])]
        with open_private(self.output) as out:
            start = out.tell()
            # A session of its own: the demo, not the terminal's Ctrl-C, decides when it stops.
            self.proc = subprocess.Popen(command, cwd=self.layout.repo, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        with DaemonClient(self.layout, timeout=2.0) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    raise DaemonError(f"the demo's daemon exited (status {code}) before it "
                                      f"answered:\n{self._said(start)}")
                with contextlib.suppress(DaemonError):
                    if client.health().get("pid") == self.proc.pid:
                        return self
                if time.monotonic() > deadline:
                    raise DaemonError(f"the demo's daemon (PID {self.proc.pid}) did not answer "
                                      f"within {START_TIMEOUT_S:g}s; see {self.output}")
                time.sleep(0.05)

    def _said(self, start: int) -> str:
        with self.output.open("rb") as handle:
            handle.seek(start)
            return handle.read()[-2000:].decode("utf-8", "replace").strip() or "(no output)"

    def stop(self) -> int | None:
        """Stop the daemon: `POST /v1/shutdown`, then SIGTERM, then SIGKILL; its exit status."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        with contextlib.suppress(DaemonError), DaemonClient(self.layout, timeout=5.0) as client:
            client.shutdown()
        for signum, wait_s in ((None, STOP_TIMEOUT_S), (signal.SIGTERM, KILL_WAIT_S),
                               (signal.SIGKILL, KILL_WAIT_S)):
            if signum is not None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return proc.wait(timeout=wait_s)
        return proc.poll()

    def __enter__(self) -> DemoDaemon:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            click.echo(f"\nInterrupted: stopping the demo's daemon (PID {self.pid}).", err=True)
        # A second Ctrl-C must not leave the daemon behind: ignore it while stopping.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.stop()
        finally:
            signal.signal(signal.SIGINT, previous)


@dataclass
class RunOutcome:
    """What the run produced: the lead's route result and what the Scribe did."""

    result: dict[str, Any] = field(default_factory=dict)
    decisions_written: int = 0
    decisions_merged: int = 0
    merged_files: list[str] = field(default_factory=list)
    """Inbox files the Scribe merged (and so removed)."""
    scribe_caught_up: bool = False
    status: dict[str, Any] = field(default_factory=dict)


class Narrator:
    """Turns the daemon's events into one readable line each, with a status line whenever an
    agent's state changes."""

    def __init__(self, agents: list[str]):
        self.states: dict[str, str] = dict.fromkeys(agents, "-")
        self._colors = {name: AGENT_COLORS[i % len(AGENT_COLORS)]
                        for i, name in enumerate(agents)}

    def who(self, agent: str) -> str:
        color = self._colors.setdefault(agent, AGENT_COLORS[len(self._colors) % len(AGENT_COLORS)])
        return click.style(f"{agent:<8}", fg=color, bold=True)

    def status_line(self) -> str:
        shown = " · ".join(f"{name} {state}" for name, state in self.states.items())
        return click.style(f"           status: {shown}", dim=True)

    def lines(self, event: Mapping[str, Any]) -> list[str]:
        kind = str(event.get("type", ""))
        agent = str(event.get("agent") or "")
        stamp = str(event.get("ts", ""))[11:19]
        head = f"  {stamp}  {self.who(agent or 'scribe')} "
        if kind == "agent.state" and agent:
            state = str(event.get("state"))
            if self.states.get(agent) == state:
                return []
            self.states[agent] = state
            return [] if state in TRANSIENT_STATES else [self.status_line()]
        if kind == "agent.spawned":
            asked = event.get("requested_by")
            by = f" (asked by {asked})" if asked else ""
            return [head + f"starts{by}: {one_line(event.get('task'), 90)}"]
        if kind == "session.message" and event.get("role") == "assistant":
            content = one_line(event.get("content"), 110)
            return [head + click.style(f"says: {content}", italic=True)] if content else []
        if kind == "tool.started":
            return [head + f"→ {event.get('tool')}({_arguments(event.get('arguments'))})"]
        if kind == "tool.completed":
            ok = event.get("result_type") == "success"
            mark = click.style("✓", fg="green") if ok else click.style("✗", fg="red")
            return [head + f"  {mark} {event.get('tool')}: {one_line(event.get('summary'), 90)}"]
        if kind == "agent.completed":
            tokens = int(event.get("input_tokens") or 0) + int(event.get("output_tokens") or 0)
            return [head + f"done: {event.get('turns')} turns, {tokens} tokens (recorded)"]
        if kind == "agent.error":
            return [head + click.style(f"failed: {event.get('error')}", fg="red")]
        if kind == "scribe.merged":
            return [head + f"merged {event.get('merged')} decision(s) from the inbox into "
                           "decisions.md:",
                    *(f"{'':<20}{name}" for name in event.get("files") or [])]
        if kind == "scribe.rejected":
            return [head + click.style(f"rejected {event.get('file')}: {event.get('reason')}",
                                       fg="red")]
        return []


def _arguments(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    return ", ".join(f"{key}={one_line(json.dumps(value, ensure_ascii=False), 36)}"
                     for key, value in arguments.items())


class _Tally:
    """What the event pump has seen, for the run to wait on."""

    def __init__(self) -> None:
        self.written = 0
        self.merged = 0
        self.merged_files: list[str] = []
        self._arrived = anyio.Event()

    def count(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if (kind == "tool.completed" and event.get("tool") == "squad_decide"
                and event.get("result_type") == "success"):
            self.written += 1
        elif kind == "scribe.merged":
            self.merged += int(event.get("merged") or 0) + int(event.get("skipped") or 0)
            self.merged_files += [str(name) for name in event.get("files") or []]
        self._arrived.set()
        self._arrived = anyio.Event()

    async def merged_all(self) -> None:
        """Return once the Scribe has merged every decision written so far."""
        while self.merged < self.written:
            await self._arrived.wait()

    async def quiet(self, seconds: float) -> None:
        """Return once no event has arrived for `seconds`."""
        while True:
            with anyio.move_on_after(seconds) as silence:
                await self._arrived.wait()
            if silence.cancelled_caught:
                return


async def play(layout: SquadLayout, agents: list[str], task: str, *, lead: str,
               pace: float) -> RunOutcome:
    """Route `task` to `lead` while narrating the event stream; wait for the Scribe."""
    narrator = Narrator(agents)
    tally = _Tally()
    outcome = RunOutcome()
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](EVENT_BUFFER)
    async with AsyncDaemonClient(layout) as client:
        async with client.subscribe_raw() as stream, anyio.create_task_group() as group:
            pump_scope = anyio.CancelScope()

            async def pump(out: MemoryObjectSendStream[dict[str, Any]]) -> None:
                async with out:
                    with pump_scope:
                        async for event in stream:
                            tally.count(event)
                            await out.send(event)

            group.start_soon(pump, send)
            group.start_soon(_narrate, receive, narrator, pace)
            with anyio.fail_after(ROUTE_TIMEOUT_S):
                outcome.result = await client.route(task, lead, wait=True)
            with anyio.move_on_after(SCRIBE_TIMEOUT_S):
                await tally.merged_all()
            with anyio.move_on_after(QUIET_LIMIT_S):
                await tally.quiet(QUIET_S)
            pump_scope.cancel()
        outcome.status = await client.status()
    outcome.decisions_written, outcome.decisions_merged = tally.written, tally.merged
    outcome.merged_files = tally.merged_files
    outcome.scribe_caught_up = tally.merged >= tally.written
    return outcome


async def _narrate(events: MemoryObjectReceiveStream[dict[str, Any]], narrator: Narrator,
                   pace: float) -> None:
    async with events:
        async for event in events:
            lines = narrator.lines(event)
            for line in lines:
                click.echo(line)
            if lines and pace > 0:
                await anyio.sleep(pace)
