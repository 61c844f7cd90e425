"""Money: what a model call costs at the `[pricing]` prices, and the spending ledger.

The ledger is one JSON-lines file per UTC day under `run/spend/`, a line per model call, each
appended and fsynced before the call counts: the totals the budgets check (today's, each
agent's today, each route tree's, each session's tokens) are rebuilt from it at start, so a
restart forgets nothing. An unknown price is an unknown cost (None), never 0.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from squadd.config import PriceSettings
from squadd.contracts.messages import Usage
from squadd.fsio import append_fsync
from squadd.state.layout import SquadLayout

log = structlog.get_logger("squadd.spending")

PER_MILLION = 1_000_000
ROUTE_DAYS = 7
"""Days of ledger read back at start for the route trees' and sessions' totals."""
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
    plain = max(0, usage.input_tokens - read - written)
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
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%d")


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

    def load(self) -> None:
        """Rebuild the totals from the last `ROUTE_DAYS` days of ledger (blocking)."""
        now = self.clock()
        today = utc_day(now)
        with self._lock:
            self._day = today
            for back in range(ROUTE_DAYS - 1, -1, -1):
                day = utc_day(now - back * 86400)
                for spend in _read_day(self.layout.spend_file(day)):
                    self._count(spend, today=day == today)

    def record(self, spend: Spend) -> None:
        """Append `spend` durably, then count it (blocking)."""
        line = json.dumps(asdict(spend), separators=(",", ":")) + "\n"
        append_fsync(self.layout.spend_file(utc_day(spend.ts)), line)
        with self._lock:
            self._roll()
            self._count(spend, today=utc_day(spend.ts) == self._day)

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
