"""The human inbox on disk: every item that waits on a person, and how each was resolved.

One append-only JSON-lines log (`run/inbox.jsonl`): an `add` line per item, a `resolve` line
when a person (or an expiry) answers it, a `notified` line per channel that told someone.
Each line is appended and fsynced under the log's lock before anyone hears of it, so items
survive a kill; replaying the log gives the state back. A torn last line is skipped.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from typing import Any, Literal

import structlog
from pydantic import BaseModel, Field, ValidationError

from squadd.fsio import append_fsync, file_lock
from squadd.state.layout import SquadLayout

log = structlog.get_logger("squadd.inbox")

ItemKind = Literal["approval", "landing", "parked", "failed", "question"]
Action = Literal["approve", "deny", "answer", "resume", "dismiss"]
MAX_OPEN_ITEMS = 10_000
"""Open items at most; past this a new one is refused (the person has a backlog to clear)."""


class InboxItem(BaseModel):
    """One thing waiting on a person."""

    id: str
    kind: ItemKind
    reason: str
    created: float
    """Unix time it was added (its age is counted from here)."""
    agent: str = ""
    session_id: str | None = None
    route: str | None = None
    """The session that started the route tree it belongs to."""
    key: str = ""
    """What it is about, so the same thing is never added twice (e.g. `call:SESSION:CALL`)."""
    actions: list[Action] = Field(default_factory=list)
    """The commands that resolve it (`squadd inbox ACTION ID`)."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Kind-specific facts: the tool and its arguments, the question, the budget breached."""
    resolved: float | None = None
    resolution: dict[str, Any] | None = None
    """How it was resolved: `action`, `by`, and `answer`, `budget_usd` or `reason`."""
    notified: list[str] = Field(default_factory=list)
    """The channels that told someone of it (`command`, `webhook`)."""
    escalated: bool = False

    @property
    def open(self) -> bool:
        return self.resolved is None

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.created)


class InboxStore:
    """The items, replayed from the log at start and kept in memory; every change appended
    durably first (blocking: call from a worker thread)."""

    def __init__(self, layout: SquadLayout):
        self.layout = layout
        self.path = layout.human_inbox
        self._items: dict[str, InboxItem] = {}
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        with self._lock:
            self._items.clear()
            self._keys.clear()
            for record in _read(self.path):
                self._apply(record)

    def items(self, *, include_resolved: bool = False) -> list[InboxItem]:
        """Oldest first."""
        with self._lock:
            found = [item.model_copy(deep=True) for item in self._items.values()
                     if include_resolved or item.open]
        return sorted(found, key=lambda item: item.created)

    def get(self, item_id: str) -> InboxItem | None:
        with self._lock:
            item = self._items.get(item_id)
            return item.model_copy(deep=True) if item is not None else None

    def by_key(self, key: str) -> InboxItem | None:
        with self._lock:
            item_id = self._keys.get(key)
            item = self._items.get(item_id) if item_id else None
            return item.model_copy(deep=True) if item is not None else None

    def add(self, item: InboxItem) -> tuple[InboxItem, bool]:
        """Add `item` durably; with a `key` already open, the item there (and False)."""
        with self._lock, file_lock(self.layout.lock_for(self.path), timeout=30):
            if item.key:
                known = self._items.get(self._keys.get(item.key, ""))
                if known is not None and known.open:
                    return known.model_copy(deep=True), False
            if sum(1 for i in self._items.values() if i.open) >= MAX_OPEN_ITEMS:
                raise OverflowError(f"{MAX_OPEN_ITEMS} inbox items are open: resolve some "
                                    "first ('squadd inbox')")
            record = {"op": "add", "item": item.model_dump(mode="json")}
            self._append(record)
            self._apply(record)
            return item.model_copy(deep=True), True

    def resolve(self, item_id: str, resolution: dict[str, Any],
                *, now: float | None = None) -> InboxItem | None:
        """Mark an open item resolved; None when there is no such open item."""
        with self._lock, file_lock(self.layout.lock_for(self.path), timeout=30):
            item = self._items.get(item_id)
            if item is None or not item.open:
                return None
            record = {"op": "resolve", "id": item_id, "at": now or time.time(),
                      "resolution": resolution}
            self._append(record)
            self._apply(record)
            return self._items[item_id].model_copy(deep=True)

    def escalate(self, item_id: str) -> InboxItem | None:
        with self._lock, file_lock(self.layout.lock_for(self.path), timeout=30):
            item = self._items.get(item_id)
            if item is None or not item.open or item.escalated:
                return None
            record = {"op": "escalate", "id": item_id}
            self._append(record)
            self._apply(record)
            return self._items[item_id].model_copy(deep=True)

    def notified(self, item_id: str, channel: str) -> None:
        """`channel` told someone of the item: never again, after a restart too."""
        with self._lock, file_lock(self.layout.lock_for(self.path), timeout=30):
            record = {"op": "notified", "id": item_id, "channel": channel}
            self._append(record)
            self._apply(record)

    def _append(self, record: dict[str, Any]) -> None:
        append_fsync(self.path, json.dumps(record, separators=(",", ":"),
                                           ensure_ascii=False) + "\n")

    def _apply(self, record: dict[str, Any]) -> None:
        op = record.get("op")
        if op == "add":
            item = InboxItem.model_validate(record["item"])
            self._items[item.id] = item
            if item.key:
                self._keys[item.key] = item.id
            return
        found = self._items.get(str(record.get("id")))
        if found is None:
            return
        item = found
        if op == "resolve":
            item.resolved = float(record.get("at") or time.time())
            item.resolution = dict(record.get("resolution") or {})
        elif op == "notified":
            channel = str(record.get("channel"))
            if channel not in item.notified:
                item.notified.append(channel)
        elif op == "escalate":
            item.escalated = True


def _read(path: Any) -> Iterable[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            record = json.loads(line)
            if record.get("op") == "add":
                InboxItem.model_validate(record["item"])
            records.append(record)
        except (ValueError, KeyError, AttributeError, ValidationError):
            log.warning("inbox line skipped", path=str(path), line=number)
    return records
