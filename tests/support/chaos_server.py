"""A chaos model server for the soak: an OpenAI-compatible `OpenAIServer` whose answers come from
scripted Squad agents (`tests.support.chaos_agent`) and which injects faults at configured rates.

Every request is decided from its conversation alone (the agent, the task id, the turn) and the
seed, so a run is reproducible. Each one is logged as a `ChaosRecord`: arrival time, daemon epoch,
body hash, conversation, the fault injected, and for a 429/503 the earliest moment a retry may
arrive. Retries are attributed by body hash: the provider sends the same bytes again, and a
restarted daemon starts a new epoch (`begin_epoch`), so a resumed conversation is not a retry.
"""

from __future__ import annotations

import email.utils
import hashlib
import itertools
import json
import math
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tests.support.chaos_agent import AgentScript, Behaviour, Turn
from tests.support.model_servers import OpenAIServer, Reply

CLIENT_ERRORS = (400, 401, 404)
"""Answers a provider must never retry."""


@dataclass(frozen=True)
class FaultRates:
    """Chances, per request, of each HTTP fault (they exclude each other), and the Retry-After
    the server asks for."""

    rate_limited: float = 0.03
    """429 with Retry-After: seconds, or (every other time) an HTTP date."""
    server_error: float = 0.02
    """500, no Retry-After."""
    unavailable: float = 0.02
    """503, with a Retry-After half the time."""
    dropped: float = 0.02
    """The connection closes mid-response (or before any byte)."""
    slow: float = 0.005
    """The answer comes after the client's read timeout."""
    malformed: float = 0.003
    """A 200 whose body is not JSON."""
    client_error: float = 0.003
    """400, 401 or 404."""
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        total = (self.rate_limited + self.server_error + self.unavailable + self.dropped
                 + self.slow + self.malformed + self.client_error)
        if not 0 <= total <= 1:
            raise ValueError(f"the HTTP fault rates add up to {total:g}: they must be within 0..1")
        if self.retry_after_s < 1:
            raise ValueError("retry_after_s must be a whole number of seconds, at least 1")

    def pick(self, rng: random.Random) -> str | None:
        draw = rng.random()
        for name, rate in (("429", self.rate_limited), ("500", self.server_error),
                           ("503", self.unavailable), ("drop", self.dropped),
                           ("slow", self.slow), ("malformed", self.malformed),
                           ("client_error", self.client_error)):
            if draw < rate:
                return name
            draw -= rate
        return None


@dataclass(frozen=True)
class ChaosRecord:
    """One request as the chaos server saw and answered it."""

    seq: int
    arrived: float
    """time.monotonic() when it arrived."""
    epoch: int
    """Which daemon process sent it (`begin_epoch` counts restarts)."""
    body_hash: str
    conversation: str
    """The task id of the conversation ("" when the request carried none)."""
    agent: str
    turn: int
    """Assistant messages already in the conversation."""
    attempt: int
    """Earlier requests with the same body (in any epoch)."""
    fault: str
    """"" for a clean answer, else the HTTP fault ("429", "drop", ...) or the tool fault."""
    status: int
    """The HTTP status sent (0 when the connection was dropped before one)."""
    retry_after: str | None
    not_before: float | None
    """For an answer with Retry-After: the monotonic time before which no retry may arrive."""
    answered: float
    """time.monotonic() just before the answer was written."""


class ChaosServer(OpenAIServer):
    """The chaos model server. Start it (`with ChaosServer(...) as server`), point the daemon's
    provider at `server.url`, and read `records` afterwards."""

    def __init__(self, *, seed: int, agents: tuple[str, ...], faults: FaultRates | None = None,
                 behaviour: Behaviour | None = None, read_timeout_s: float = 2.0,
                 max_depth: int = 3):
        self.seed = seed
        self.faults = faults or FaultRates()
        self.read_timeout_s = read_timeout_s
        self.script = AgentScript(seed=seed, agents=agents, behaviour=behaviour or Behaviour(),
                                  max_depth=max_depth)
        self._log_lock = threading.Lock()
        self._records: list[ChaosRecord] = []
        self._attempts: Counter[str] = Counter()
        self._handed: Counter[str] = Counter()
        self._handing = threading.Condition(self._log_lock)
        self._seq = itertools.count()
        self._epoch = 0
        super().__init__(self._respond, keep_bodies=False)

    # The test's side.
    def begin_epoch(self) -> int:
        """A new daemon process is about to talk to us (call it once the old one is dead)."""
        with self._log_lock:
            self._epoch += 1
            return self._epoch

    @property
    def records(self) -> list[ChaosRecord]:
        with self._log_lock:
            return list(self._records)

    def handed_out(self, tool: str) -> int:
        """Calls of `tool` answered cleanly so far: a kill can be aimed just after one."""
        with self._log_lock:
            return self._handed[tool]

    def wait_handed_out(self, tool: str, past: int, timeout_s: float) -> bool:
        """Block until more than `past` calls of `tool` were answered cleanly (True), or
        `timeout_s` passed (False)."""
        with self._handing:
            return self._handing.wait_for(lambda: self._handed[tool] > past, timeout_s)

    def fault_counts(self) -> dict[str, int]:
        """Requests by the fault injected ("none": answered cleanly)."""
        counts = Counter(r.fault or "none" for r in self.records)
        return dict(sorted(counts.items()))

    # The server's side (runs in its request threads).
    def _respond(self, body: Any) -> Reply:
        arrived = time.monotonic()
        digest = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(),
                                 digest_size=16).hexdigest()
        turn = self.script.read(body)
        with self._log_lock:
            seq = next(self._seq)
            epoch = self._epoch
            attempt = self._attempts[digest]
            self._attempts[digest] += 1
        key = (f"{turn.task_id}|{turn.number}|{attempt}" if turn is not None
               else f"seq{seq}")
        fault = self.faults.pick(random.Random(f"{self.seed}|http|{key}"))
        reply, label, retry_after, wait = self._answer(fault, turn, random.Random(
            f"{self.seed}|shape|{key}"))
        answered = time.monotonic()
        not_before = None if wait is None else wait.deadline(answered)
        record = ChaosRecord(
            seq=seq, arrived=arrived, epoch=epoch, body_hash=digest,
            conversation=turn.task_id if turn is not None else "",
            agent=turn.agent if turn is not None else "", turn=turn.number if turn else -1,
            attempt=attempt, fault=label, status=reply.status if not reply.drop else 0,
            retry_after=retry_after, not_before=not_before, answered=answered)
        with self._log_lock:
            self._records.append(record)
        return reply

    def _answer(self, fault: str | None, turn: Turn | None, rng: random.Random
                ) -> tuple[Reply, str, str | None, _Wait | None]:
        """The reply, its fault label, the Retry-After sent and the wait it asks for."""
        seconds = self.faults.retry_after_s
        if fault == "429":
            wait = _Wait(seconds=seconds) if rng.random() < 0.5 else _Wait.http_date(seconds)
            return (self.error(429, "chaos: rate limited", retry_after=wait.header,
                               kind="rate_limit_error"), "429", wait.header, wait)
        if fault == "500":
            return self.error(500, "chaos: internal error", kind="server_error"), "500", None, None
        if fault == "503":
            asked = _Wait(seconds=seconds) if rng.random() < 0.5 else None
            header = asked.header if asked is not None else None
            return (self.error(503, "chaos: overloaded", retry_after=header,
                               kind="server_error"), "503", header, asked)
        if fault == "client_error":
            status = rng.choice(CLIENT_ERRORS)
            return (self.error(status, f"chaos: refused with {status}"), str(status), None, None)
        if fault == "malformed":
            return Reply(raw=b'{"id": "chatcmpl-chaos", "choices": [{"message": {"rol'),\
                "malformed", None, None
        answer, tool_fault, names = self._agent_reply(turn)
        if fault == "drop":
            if rng.random() < 0.3:
                return Reply(drop=True), "drop", None, None
            size = len(json.dumps(answer.body).encode())
            return (Reply(body=answer.body, drop_after_bytes=rng.randrange(0, max(1, size // 2))),
                    "drop", None, None)
        if fault == "slow":
            return (Reply(body=answer.body, delay_s=self.read_timeout_s + 1.0), "slow", None,
                    None)
        with self._handing:
            self._handed.update(names)
            self._handing.notify_all()
        return answer, tool_fault, None, None

    def _agent_reply(self, turn: Turn | None) -> tuple[Reply, str, list[str]]:
        """The agent's answer, its tool fault, and the names of the tools it calls."""
        if turn is None:
            return self.text_turn("I only answer soak tasks."), "", []
        action = self.script.act(turn)
        if action.calls:
            return (self.tool_call_turn(*action.calls, text=action.text), action.fault,
                    [call[0] for call in action.calls])
        return self.text_turn(action.text or ""), action.fault, []


@dataclass(frozen=True)
class _Wait:
    """A Retry-After: whole seconds from the answer, or an HTTP date (a monotonic deadline)."""

    seconds: int = 0
    date: str | None = None
    mono_deadline: float = 0.0

    @classmethod
    def http_date(cls, seconds: int) -> _Wait:
        """A date at least `seconds` away (dates have whole seconds): up to one more second."""
        wall, mono = time.time(), time.monotonic()
        target = math.floor(wall) + seconds + 1
        return cls(date=email.utils.formatdate(target, usegmt=True),
                   mono_deadline=mono + (target - wall))

    @property
    def header(self) -> str:
        return self.date if self.date is not None else str(self.seconds)

    def deadline(self, answered: float) -> float:
        return self.mono_deadline if self.date is not None else answered + self.seconds
