"""Money: what a model call costs at the `[pricing]` prices, and the spending ledger.

The ledger is one JSON-lines file per UTC day under `run/spend/`, a line per model call: an
index of what the transcripts hold durably (each assistant record carries its call's tokens,
cost and message id, synced before the call has any effect). A call counts at once (in
memory); its line is appended with the next batch, off the route's path, and synced when the
runtime stops. At start the totals the budgets check (today's, each agent's today, each route
tree's, each session's tokens) are rebuilt from the ledger, then from the transcripts written
since its last line, for the calls a kill or a power loss kept from it: a restart forgets
nothing. An unknown price is an unknown cost (None), never 0.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from squadd.config import PriceSettings
from squadd.contracts.messages import Usage
from squadd.errors import SquaddError
from squadd.fsio import PRIVATE_FILE, append_fsync, private_dir, write_all
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import list_transcripts, read_transcript

log = structlog.get_logger("squadd.spending")

PER_MILLION = 1_000_000
ROUTE_DAYS = 7
"""Days of ledger read back at start for the route trees' and sessions' totals."""
RECONCILE_SLACK_S = 60.0
"""Transcripts written this long before the ledger's last line are read at start too."""
GATHER_S = 0.05
"""How long the ledger's writer gathers calls' costs into one append (a trip to a thread
each): they are counted at once, and the file is read only at a start, which finds a lost
tail in the transcripts."""
MAX_UNWRITTEN = 100_000
"""Calls counted and waiting for the ledger's next write at most."""
MAX_TRACKED = 100_000
"""Route trees and sessions whose totals are kept in memory (the oldest are forgotten)."""


def price_for(pricing: Mapping[str, PriceSettings], provider: str,
              model: str) -> PriceSettings | None:
    """The price of `provider/model`: its own table, else the longest table name it starts
    with followed by "-" (a dated version: claude-sonnet-4-5-20250929); None when unknown."""
    if not model:
        return None
    exact = pricing.get(f"{provider}/{model}")
    if exact is not None:
        return exact
    best: tuple[int, PriceSettings] | None = None
    for key, price in pricing.items():
        prefix = f"{provider}/"
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if model.startswith(name + "-") and (best is None or len(name) > best[0]):
            best = (len(name), price)
    return best[1] if best is not None else None


def cost_of(usage: Usage, price: PriceSettings | None) -> float | None:
    """US dollars for `usage` at `price`; None when the price is unknown."""
    if price is None:
        return None
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    plain = max(0, usage.input_tokens - usage.cached_in_input)
    cache_read = price.input if price.cache_read is None else price.cache_read
    cache_write = price.input if price.cache_write is None else price.cache_write
    total = (plain * price.input + read * cache_read + written * cache_write
             + usage.output_tokens * price.output)
    return total / PER_MILLION


def add_cost(a: float | None, b: float | None) -> float | None:
    """A sum of costs: unknown when either is."""
    return None if a is None or b is None else a + b


def shown_cost(cost: float | None) -> str:
    """A cost for people: `$0.0123`, or `unknown`."""
    if cost is None:
        return "unknown"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def utc_day(now: float) -> str:
    """The UTC date of a Unix time, as the ledger's file names it (`YYYY-MM-DD`)."""
    return _day_name(int(now // 86400))  # a Unix day is 86,400 seconds: no leap seconds


@functools.lru_cache(maxsize=16)
def _day_name(day: int) -> str:
    # Every model call asks two or three times; the answer changes once a day.
    return dt.date.fromordinal(_EPOCH_ORDINAL + day).isoformat()


_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


@dataclass(frozen=True)
class Spend:
    """One model call, as the ledger keeps it."""

    ts: float
    session_id: str
    agent: str
    root: str
    """The session that started the route tree this call belongs to."""
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    message_id: str = ""
    """The assistant message the call answered with (its transcript record carries the same
    tokens and cost): how a restart finds the calls a kill kept from the ledger."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class Totals:
    usd: float = 0.0
    unknown_calls: int = 0
    """Calls whose cost is unknown (their model has no price)."""
    tokens: int = 0

    def add(self, spend: Spend) -> None:
        self.tokens += spend.tokens
        if spend.cost_usd is None:
            self.unknown_calls += 1
        else:
            self.usd += spend.cost_usd

    @property
    def cost(self) -> float | None:
        """The dollars spent, None when some of it is unknown."""
        return None if self.unknown_calls else self.usd


class SpendingLedger:
    """Every model call's cost, durable, and the totals budgets are checked against.

    `record` blocks (append + fsync): call it in a worker thread. The totals are read on the
    event loop; a lock keeps the two consistent."""

    def __init__(self, layout: SquadLayout, *, clock: Callable[[], float] = time.time):
        self.layout = layout
        self.clock = clock
        self._lock = threading.Lock()
        self._day = ""
        self._today = Totals()
        self._agents: dict[str, Totals] = {}
        self._routes: OrderedDict[str, Totals] = OrderedDict()
        self._sessions: OrderedDict[str, Totals] = OrderedDict()
        self._roots: OrderedDict[str, str] = OrderedDict()
        self._unwritten: list[Spend] = []
        self._more = anyio.Event()

    def load(self) -> None:
        """Rebuild the totals from the last `ROUTE_DAYS` days of ledger, then add the calls
        of transcripts written since its last line that it lacks (a kill caught them before
        their batch was synced): blocking."""
        now = self.clock()
        today = utc_day(now)
        seen: set[tuple[str, str]] = set()
        try:  # no ledger yet: no squadd that keeps one has run here, nothing to find
            newest = self.layout.spend_dir.stat().st_mtime
        except OSError:
            newest = math.inf
        with self._lock:
            self._day = today
            for back in range(ROUTE_DAYS - 1, -1, -1):
                day = utc_day(now - back * 86400)
                for spend in _read_day(self.layout.spend_file(day)):
                    self._count(spend, today=day == today)
                    seen.add((spend.session_id, spend.message_id))
                    newest = spend.ts if math.isinf(newest) else max(newest, spend.ts)
        missing = [spend for spend in _from_transcripts(self.layout, newest - RECONCILE_SLACK_S)
                   if (spend.session_id, spend.message_id) not in seen
                   and spend.ts > now - ROUTE_DAYS * 86400]
        for spend in sorted(missing, key=lambda s: s.ts):
            spend = replace(spend, root=self.root_of(spend.root) or spend.root)
            self.record(spend)

    def record(self, spend: Spend) -> None:
        """Append `spend` durably, then count it (blocking)."""
        line = json.dumps(vars(spend), separators=(",", ":")) + "\n"
        append_fsync(self.layout.spend_file(utc_day(spend.ts)), line)
        with self._lock:
            self._roll()
            self._count(spend, today=utc_day(spend.ts) == self._day)

    def record_soon(self, spend: Spend) -> None:
        """Count `spend` now; it reaches the disk with the next batch `run` writes (one append
        and one fsync for every call that came meanwhile)."""
        self.count(spend)
        if len(self._unwritten) >= MAX_UNWRITTEN:
            log.warning("spending ledger behind: a call's cost kept in memory only",
                        session_id=spend.session_id)
            return
        self._unwritten.append(spend)
        self._more.set()

    async def run(self, *, gather_s: float = GATHER_S,
                  pause: Callable[[float], Awaitable[None]] = anyio.sleep,
                  task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Write what `record_soon` counted, a batch at a time, until cancelled (then the
        rest, shielded): a batch is the calls counted in the `gather_s` after the first."""
        task_status.started()
        try:
            while True:
                await self._more.wait()
                await pause(gather_s)
                self._more = anyio.Event()
                await self.flush(sync=False)
        finally:
            with anyio.CancelScope(shield=True):
                await self.flush(sync=True)

    async def flush(self, *, sync: bool = True) -> None:
        """Append every spend counted and not written yet, fsynced with `sync` (without: the
        transcripts, durable, are what a start reads a lost tail back from)."""
        while self._unwritten:
            batch, self._unwritten = self._unwritten, []
            by_day: dict[str, list[str]] = {}
            for spend in batch:
                by_day.setdefault(utc_day(spend.ts), []).append(
                    json.dumps(vars(spend), separators=(",", ":")) + "\n")
            for day, lines in by_day.items():
                try:
                    await anyio.to_thread.run_sync(
                        append_fsync if sync else _append, self.layout.spend_file(day),
                        "".join(lines))
                except OSError as exc:
                    log.warning("spending ledger not written", day=day, calls=len(lines),
                                error=exc.strerror)

    def count(self, spend: Spend) -> None:
        """Count `spend` without keeping it on disk (a call that used nothing)."""
        with self._lock:
            self._roll()
            self._count(spend, today=utc_day(spend.ts) == self._day)

    def _count(self, spend: Spend, *, today: bool) -> None:
        if today:
            self._today.add(spend)
            self._agents.setdefault(spend.agent, Totals()).add(spend)
        for table, key in ((self._routes, spend.root), (self._sessions, spend.session_id)):
            totals = table.get(key)
            if totals is None:
                totals = table[key] = Totals()
                while len(table) > MAX_TRACKED:
                    table.popitem(last=False)
            totals.add(spend)
        self._roots[spend.session_id] = spend.root
        while len(self._roots) > MAX_TRACKED:
            self._roots.popitem(last=False)

    def _roll(self) -> None:
        today = utc_day(self.clock())
        if today != self._day:
            self._day, self._today, self._agents = today, Totals(), {}

    # Totals (snapshots: safe to read on the loop).
    def today(self) -> Totals:
        with self._lock:
            self._roll()
            return Totals(**asdict(self._today))

    def agent_today(self, agent: str) -> Totals:
        with self._lock:
            self._roll()
            return Totals(**asdict(self._agents.get(agent, Totals())))

    def agents_today(self) -> dict[str, Totals]:
        with self._lock:
            self._roll()
            return {agent: Totals(**asdict(t)) for agent, t in self._agents.items()}

    def route(self, root: str) -> Totals:
        with self._lock:
            return Totals(**asdict(self._routes.get(root, Totals())))

    def session(self, session_id: str) -> Totals:
        with self._lock:
            return Totals(**asdict(self._sessions.get(session_id, Totals())))

    def root_of(self, session_id: str) -> str | None:
        """The route tree a session's calls were counted in, if it made any."""
        with self._lock:
            return self._roots.get(session_id)

    def note_root(self, session_id: str, root: str) -> None:
        """Remember which tree a session belongs to before its first call is recorded."""
        with self._lock:
            self._roots.setdefault(session_id, root)

    @property
    def day(self) -> str:
        with self._lock:
            self._roll()
            return self._day


def _append(path: Path, data: str) -> None:
    """Append `data` in one write, not synced."""
    if not path.parent.is_dir():
        private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    try:
        write_all(fd, data.encode("utf-8"))
    finally:
        os.close(fd)


def _from_transcripts(layout: SquadLayout, since: float) -> list[Spend]:
    """The calls recorded in transcripts written since `since` (those whose assistant record
    carries a cost: written by a squadd that keeps a ledger)."""
    found: list[Spend] = []
    for path in list_transcripts(layout):
        try:
            if path.stat().st_mtime < since:
                continue
            transcript = read_transcript(path)
        except (OSError, SquaddError):
            continue
        meta = transcript.meta
        session_id, agent = str(meta.get("session_id") or path.stem), str(meta.get("agent") or "")
        parent = meta.get("parent_session_id")
        for record in transcript.records:
            message = record.get("message")
            if record.get("kind") != "message" or "cost_usd" not in record \
                    or not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            try:
                ts = dt.datetime.fromisoformat(str(record.get("ts"))).timestamp()
            except ValueError:
                continue
            cost = record.get("cost_usd")
            if not record.get("input_tokens") and not record.get("output_tokens"):
                continue  # a call that used nothing is never written
            found.append(Spend(
                ts=ts, session_id=session_id, agent=agent,
                root=str(parent) if parent else session_id, provider=str(record.get(
                    "provider") or ""), model=str(meta.get("model") or ""),
                input_tokens=int(record.get("input_tokens") or 0),
                output_tokens=int(record.get("output_tokens") or 0),
                cache_read_tokens=int(record.get("cache_read_tokens") or 0),
                cache_write_tokens=int(record.get("cache_write_tokens") or 0),
                cost_usd=float(cost) if isinstance(cost, int | float) else None,
                message_id=str(message.get("id") or "")))
    return found


def _read_day(path: Path) -> list[Spend]:
    """One day's calls; a torn last line (a crash mid-append) and foreign lines are skipped."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("spending ledger unreadable", path=str(path), error=exc.strerror)
        return []
    found: list[Spend] = []
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            data: Any = json.loads(line)
            found.append(Spend(**data))
        except (ValueError, TypeError):
            log.warning("spending ledger line skipped", path=str(path), line=number)
    return found
