"""The soak's clients: one loop per client that routes tasks through its entry point (HTTP through
`AsyncDaemonClient`, the CLI as `squadd route` subprocesses, MCP through a stdio client session
on `squadd mcp`) and waits for each accepted route's session to come to rest.

A client tolerates the daemon being down for a moment: a refused connection is retried with the
same task (nothing was accepted), a connection that broke mid-call with a new task id (it may
have been accepted; its session, if any, still has a transcript). Every wait is bounded.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from squadd.daemon.client import AsyncDaemonClient
from squadd.daemon.wire import DaemonRequestError
from squadd.errors import DaemonError, DaemonNotRunningError
from squadd.state.layout import SquadLayout
from tests.support.chaos_agent import SPAWNED_RE, task_text

SUBMIT_BOUND_S = 120.0
"""How long a client keeps trying to get one task accepted."""
UNKNOWN_BOUND_S = 15.0
"""How long a session the daemon does not know (404) is waited on before it counts as lost."""
INTERRUPTED_BOUND_S = 45.0
"""How long an interrupted session is waited on for its resume before the client moves on."""
WAIT_BOUND_S = 300.0
POLL_S = 0.25
PAUSE_S = 0.2
CALL_TIMEOUT_S = 30.0
RESTING = frozenset({"idle", "error", "destroyed"})
NOT_RUNNING = "no squadd daemon is running"
_STATE_RE = re.compile(r"\[(\w+)\] session=")


class DaemonDown(Exception):
    """Nothing answers on the socket: the call surely did nothing."""


class Ambiguous(Exception):
    """The call broke midway: it may or may not have taken effect."""


class Refused(Exception):
    """The daemon answered no (pool full, shutting down, ...)."""


class Channel(Protocol):
    via: str

    async def submit(self, task: str, agent: str) -> str: ...

    async def state(self, session_id: str) -> str | None: ...


@dataclass
class Ledger:
    """What the clients did, shared by all of them (one event loop: no lock needed)."""

    total: int
    taken: int = 0
    finished: int = 0
    accepted: dict[str, str] = field(default_factory=dict)
    """Session id -> the task and entry point that was accepted as it."""
    by_entry: Counter[str] = field(default_factory=Counter)
    daemon_down: int = 0
    ambiguous: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    not_accepted: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    """Sessions a client stopped waiting on (unknown or interrupted for too long, or slow)."""
    outcomes: Counter[str] = field(default_factory=Counter)

    def take(self) -> int | None:
        if self.taken >= self.total:
            return None
        self.taken += 1
        return self.taken


def _route_args(task: str, agent: str) -> dict[str, Any]:
    return {"task": task, "targetAgent": agent, "waitForResult": False}


class HttpChannel:
    """Routes with `AsyncDaemonClient.route_args` and polls `session()`."""

    via = "http"

    def __init__(self, client: AsyncDaemonClient):
        self.client = client

    async def submit(self, task: str, agent: str) -> str:
        try:
            result = await self.client.route_args(_route_args(task, agent))
        except DaemonNotRunningError as exc:
            raise DaemonDown(str(exc)) from None
        except DaemonRequestError as exc:
            raise Refused(str(exc)) from None
        except DaemonError as exc:
            raise Ambiguous(str(exc)) from None
        if not result.get("ok"):
            raise Refused(str(result.get("reason") or result.get("message")))
        return str(result["session_id"])

    async def state(self, session_id: str) -> str | None:
        try:
            view = await self.client.session(session_id, transcript=False)
        except DaemonNotRunningError as exc:
            raise DaemonDown(str(exc)) from None
        except DaemonRequestError as exc:
            if exc.status == 404:
                return None
            raise Ambiguous(str(exc)) from None
        except DaemonError as exc:
            raise Ambiguous(str(exc)) from None
        return str(view["session"]["state"])


class CliChannel(HttpChannel):
    """Routes with `squadd route AGENT TASK --no-wait --json` subprocesses; polls over HTTP."""

    via = "cli"

    def __init__(self, client: AsyncDaemonClient, env: dict[str, str]):
        super().__init__(client)
        self.env = env

    async def submit(self, task: str, agent: str) -> str:
        with anyio.fail_after(CALL_TIMEOUT_S * 2):
            done = await anyio.run_process(
                [sys.executable, "-m", "squadd", "route", agent, task, "--no-wait", "--json"],
                cwd=self.client.layout.repo, env=self.env, check=False)
        out, err = done.stdout.decode(), done.stderr.decode()
        if NOT_RUNNING in err:
            raise DaemonDown(err.strip())
        try:
            result = json.loads(out)
        except ValueError:
            raise Ambiguous(f"exit {done.returncode}: {err.strip()[:300]}") from None
        if done.returncode != 0 or not result.get("ok"):
            raise Refused(str(result.get("reason") or result.get("message")))
        return str(result["session_id"])


class McpChannel:
    """Routes with the squad_route tool over MCP (waitForResult false) and polls squad_status."""

    via = "mcp"

    def __init__(self, session: ClientSession):
        self.session = session

    async def _call(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            with anyio.fail_after(CALL_TIMEOUT_S):
                result = await self.session.call_tool(name, arguments)
        except TimeoutError:
            raise Ambiguous(f"{name} over MCP took over {CALL_TIMEOUT_S:g}s") from None
        text = "\n".join(block.text for block in result.content
                         if isinstance(block, types.TextContent))
        if result.is_error:
            if NOT_RUNNING in text:
                raise DaemonDown(text)
            if "did not run" in text:
                raise Ambiguous(text)
            raise Refused(text)
        return text

    async def submit(self, task: str, agent: str) -> str:
        text = await self._call("squad_route", _route_args(task, agent))
        spawned = SPAWNED_RE.search(text)
        if spawned is None:
            raise Refused(f"squad_route answered without a session id: {text[:200]}")
        return spawned.group(1)

    async def state(self, session_id: str) -> str | None:
        try:
            text = await self._call("squad_status", {"sessionId": session_id})
        except Refused as exc:
            if f"no session {session_id}" in str(exc):
                return None
            raise Ambiguous(str(exc)) from None
        found = _STATE_RE.search(text)
        if found is None:
            raise Ambiguous(f"squad_status answered without a state: {text[:200]}")
        return found.group(1)


@asynccontextmanager
async def mcp_channel(layout: SquadLayout, env: dict[str, str]) -> AsyncIterator[McpChannel]:
    """An MCP client session on `python -m squadd mcp` in the repo, kept for the whole run."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "squadd", "mcp"],
                                   cwd=layout.repo, env=env)
    with (layout.repo.parent / "mcp-stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S * 2) as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                await session.initialize()
            yield McpChannel(session)


async def run_client(channel: Channel, ledger: Ledger, agents: tuple[str, ...],
                     rng: random.Random) -> None:
    """Route tasks until the ledger has handed out all of them."""
    while (number := ledger.take()) is not None:
        agent = rng.choice(agents)
        session_id = await _submit(channel, ledger, number, agent)
        if session_id is not None:
            ledger.outcomes[await _wait(channel, ledger, session_id)] += 1
        ledger.finished += 1


async def _submit(channel: Channel, ledger: Ledger, number: int, agent: str) -> str | None:
    deadline = time.monotonic() + SUBMIT_BOUND_S
    attempt = 0
    while time.monotonic() < deadline:
        task_id = f"T{number:05d}" + (f"r{attempt}" if attempt else "")
        task = task_text(task_id, (agent,), f"soak task {number} for {agent}")
        try:
            session_id = await channel.submit(task, agent)
        except DaemonDown:
            ledger.daemon_down += 1
        except Ambiguous:
            ledger.ambiguous += 1
            attempt += 1
        except Refused as exc:
            ledger.refused[str(exc)[:80]] += 1
        else:
            ledger.accepted[session_id] = f"task {task_id} via {channel.via}"
            ledger.by_entry[channel.via] += 1
            return session_id
        await anyio.sleep(PAUSE_S)
    ledger.not_accepted.append(f"T{number:05d} via {channel.via}")
    return None


async def _wait(channel: Channel, ledger: Ledger, session_id: str) -> str:
    """Poll until the session rests; its last state seen (or why the client gave up)."""
    started = time.monotonic()
    label, since = "", started
    while time.monotonic() - started < WAIT_BOUND_S:
        try:
            state = await channel.state(session_id)
        except (DaemonDown, Ambiguous):
            label = ""  # the daemon is restarting: what it said before may change
            await anyio.sleep(PAUSE_S)
            continue
        if state in RESTING:
            return state
        if (state or "unknown") != label:
            label, since = state or "unknown", time.monotonic()
        bound = {"unknown": UNKNOWN_BOUND_S, "interrupted": INTERRUPTED_BOUND_S}.get(label)
        if bound is not None and time.monotonic() - since > bound:
            ledger.lost.append(f"{ledger.accepted[session_id]} (session {session_id}) stayed "
                               f"{label} for {bound:g}s")
            return label
        await anyio.sleep(POLL_S)
    ledger.lost.append(f"{ledger.accepted[session_id]} (session {session_id}) did not rest "
                       f"within {WAIT_BOUND_S:g}s")
    return "slow"
