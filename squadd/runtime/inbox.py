"""The inbox: everything that waits on a person, in one durable queue, and what answering does.

Items come from approvals and `squad_ask` questions (a `PersonQueue` for the tools), budgets
(a parked session), sessions that failed, and landings that need attention (found on their
workspace records). A session waiting on an item is `parked`: it holds no slot and its route
timeout stands still. Answering wakes it where it waits; after a restart (nobody waits any
more) answering resumes the session from its transcript, and the call that waited runs with
its answer. Each new item is handed to every hook (`add_hook`): notifications, hooks events.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import structlog

from squadd.config import Settings
from squadd.contracts.events import InboxAdded, InboxResolved
from squadd.errors import InboxError as InboxError
from squadd.errors import NotFoundError, SquaddError
from squadd.runtime.events import EventBus
from squadd.runtime.pool import SessionPool
from squadd.state.inbox_items import InboxItem, InboxStore, ItemKind
from squadd.state.layout import SquadLayout
from squadd.tools.people import PersonAnswer, PersonRequest
from squadd.workspaces import records as workspace_records

log = structlog.get_logger("squadd.inbox")

NewItemHook = Callable[[InboxItem], None]
"""Called on the event loop for each new item (and once more for an escalated one); it must
not block: start work elsewhere (the notifier queues it)."""
LANDING_SCAN_S = 5.0
ACTIONS: dict[str, tuple[str, ...]] = {
    "approval": ("approve", "deny"),
    "question": ("answer", "dismiss"),
    "parked": ("approve", "resume", "dismiss"),
    "failed": ("resume", "dismiss"),
    "landing": ("dismiss",),
}


class ParkedSession(Protocol):
    """What the inbox needs of a running session: its transcript marks."""

    async def park(self, reason: str, **fields: Any) -> None: ...

    async def unpark(self) -> None: ...


Resumer = Callable[[str, str | None], Awaitable[None]]
"""Resume a session that nobody waits for any more (after a restart): `(session_id, task)`,
task None to go on where it stopped."""


class Inbox:
    def __init__(self, layout: SquadLayout, settings: Settings, bus: EventBus,
                 pool: SessionPool, *, clock: Callable[[], float] = time.time):
        self.layout = layout
        self.settings = settings
        self.bus = bus
        self.pool = pool
        self.clock = clock
        self.store = InboxStore(layout)
        self.resumer: Resumer | None = None
        self._hooks: list[NewItemHook] = []
        self._waiters: dict[str, anyio.Event] = {}
        self._sessions: dict[str, ParkedSession] = {}
        self._wake = anyio.Event()
        self._settings_changed = anyio.Event()

    # Wiring.
    def add_hook(self, hook: NewItemHook) -> None:
        """Call `hook` for each new item from now on (the notifier, the hooks events)."""
        self._hooks.append(hook)

    def attach(self, session_id: str, session: ParkedSession) -> None:
        self._sessions[session_id] = session

    def detach(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    async def load(self) -> None:
        await anyio.to_thread.run_sync(self.store.load)

    # Reading.
    def items(self, *, include_resolved: bool = False) -> list[InboxItem]:
        return self.store.items(include_resolved=include_resolved)

    def get(self, item_id: str) -> InboxItem | None:
        return self.store.get(item_id)

    def answer_for(self, session_id: str, call_id: str) -> InboxItem | None:
        """The resolved item a call waited on, if a person answered it."""
        item = self.store.by_key(_call_key(session_id, call_id))
        return item if item is not None and not item.open else None

    def granted(self, scope: str, key: str) -> float:
        """Extra budget granted by `approve --budget` for one limit's scope and key."""
        total = 0.0
        for item in self.store.items(include_resolved=True):
            res = item.resolution or {}
            if item.kind == "parked" and item.details.get("scope") == scope \
                    and item.details.get("key") == key and res.get("action") == "approve":
                total += float(res.get("budget") or 0.0)
        return total

    # Adding.
    async def add(self, kind: ItemKind, reason: str, *, agent: str = "",
                  session_id: str | None = None, route: str | None = None, key: str = "",
                  details: dict[str, Any] | None = None) -> InboxItem:
        """Add an item durably (one with an open item's `key` gives that item back), then
        tell the bus and the hooks of a new one."""
        item = InboxItem(id=_new_id(), kind=kind, reason=reason[:1000], created=self.clock(),
                         agent=agent, session_id=session_id, route=route, key=key,
                         actions=list(ACTIONS[kind]), details=details or {})
        with anyio.CancelScope(shield=True):
            item, new = await anyio.to_thread.run_sync(self.store.add, item)
        if new:
            self.bus.publish(InboxAdded(session_id=session_id, agent=agent or None,
                                        item_id=item.id, kind=kind, reason=item.reason,
                                        actions=list(item.actions), route=route))
            self._tell(item)
            self._wake.set()
        return item

    def _tell(self, item: InboxItem) -> None:
        for hook in self._hooks:
            try:
                hook(item)
            except Exception:  # a broken hook must not lose the item or stop the others
                log.exception("inbox hook failed", item=item.id)

    # Waiting (parked).
    async def wait_parked(self, item: InboxItem, reason: str,
                          cleared: Callable[[], bool] | None = None) -> InboxItem:
        """Park the item's session until the item is resolved; the resolved item. With
        `cleared`, each `settings_changed()` asks it again: True resolves the item (`resume`,
        by the settings)."""
        session_id = item.session_id or ""
        session = self._sessions.get(session_id)
        if session is not None:
            await session.park(reason, item=item.id)
        async with self.pool.parked(session_id, reason):
            if cleared is None:
                resolved = await self._wait(item.id)
            else:
                resolved = await self._wait_or_clear(item, cleared)
        if session is not None:
            await session.unpark()
        return resolved

    def settings_changed(self) -> None:
        """The settings changed (`squadd reload`): parked sessions check their limits again."""
        changed, self._settings_changed = self._settings_changed, anyio.Event()
        changed.set()

    async def _wait_or_clear(self, item: InboxItem, cleared: Callable[[], bool]) -> InboxItem:
        while True:
            answered = await self._answer_or_change(item.id, self._settings_changed)
            if answered is not None:
                return answered
            if cleared():
                with contextlib.suppress(InboxError):
                    return await self.resolve(item.id, "resume", reason="the limit was raised",
                                              by="settings")
                return self.store.get(item.id) or item

    async def _answer_or_change(self, item_id: str, changed: anyio.Event) -> InboxItem | None:
        """The resolved item, or None once the settings changed first."""
        done: list[InboxItem] = []
        async with anyio.create_task_group() as tg:
            async def answered() -> None:
                done.append(await self._wait(item_id))
                tg.cancel_scope.cancel()

            async def settings() -> None:
                await changed.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(answered)
            tg.start_soon(settings)
        return done[0] if done else None

    async def _wait_bounded(self, item: InboxItem, timeout_s: float) -> InboxItem:
        with anyio.move_on_after(timeout_s):
            return await self._wait(item.id)
        why = f"no answer within {timeout_s:g} s (tools.approval_timeout_s)"
        with contextlib.suppress(InboxError):
            return await self.resolve(item.id, "deny" if item.kind == "approval" else "dismiss",
                                      reason=why, by="expiry")
        return self.store.get(item.id) or item

    async def _wait(self, item_id: str) -> InboxItem:
        event = self._waiters.setdefault(item_id, anyio.Event())
        try:
            while True:
                item = self.store.get(item_id)
                if item is None:
                    raise NotFoundError(f"inbox item {item_id} vanished")
                if not item.open:
                    return item
                await event.wait()
                event = self._waiters[item_id] = anyio.Event()
        finally:
            self._waiters.pop(item_id, None)

    async def ask_person(self, request: PersonRequest) -> PersonAnswer:
        """`PersonQueue` for the tools: one item per call, parked until answered."""
        key = _call_key(request.session_id, request.call_id)
        item = self.store.by_key(key)  # a call run again after a restart finds its own
        if item is None:
            item = await self.add(request.kind, request.reason, agent=request.agent,
                                  session_id=request.session_id,
                                  route=self._route_of(request.session_id), key=key,
                                  details={**request.details, "call_id": request.call_id})
            if request.on_added is not None:
                request.on_added(item.id)
        running = self.pool.get(request.session_id)
        if item.open and (running is None or running.state not in ("active", "creating")):
            # A call from outside any session (the tool API, MCP): nothing to park, and its
            # caller waits on the line, so the wait is bounded as before the inbox.
            item = await self._wait_bounded(item, self.settings.tools.approval_timeout_s)
        elif item.open:
            item = await self.wait_parked(item, request.kind)
        res = item.resolution or {}
        return PersonAnswer(action=str(res.get("action", "")), answer=str(res.get("answer", "")),
                            reason=str(res.get("reason", "")), by=str(res.get("by", "")),
                            item_id=item.id)

    def _route_of(self, session_id: str) -> str:
        record = self.pool.get(session_id)
        seen: set[str] = set()
        while record is not None and record.info.parent_session_id \
                and record.session_id not in seen:
            seen.add(record.session_id)
            parent = self.pool.get(record.info.parent_session_id)
            if parent is None:
                return record.info.parent_session_id
            record = parent
        return record.session_id if record is not None else session_id

    # Resolving.
    async def resolve(self, item_id: str, action: str, *, answer: str = "",
                      budget: float | None = None, reason: str = "",
                      by: str = "person") -> InboxItem:
        """Resolve an open item with one of its actions; wake its session, or resume it when
        nobody waits for it any more. `InboxError` says what was wrong."""
        item = self.store.get(item_id)
        if item is None:
            raise InboxError(f"no inbox item {item_id}: 'squadd inbox' lists them")
        if not item.open:
            raise InboxError(f"inbox item {item_id} was already resolved "
                             f"({(item.resolution or {}).get('action')})")
        if action not in item.actions:
            raise InboxError(f"a {item.kind} item takes {', '.join(item.actions)}, not {action}")
        if action == "answer" and not answer.strip():
            raise InboxError("an answer needs its text: squadd inbox answer ID \"...\"")
        if budget is not None and (not math.isfinite(budget) or budget <= 0):
            raise InboxError(f"--budget must be a positive amount, got {budget}")
        if budget is not None and item.kind != "parked":
            raise InboxError(f"--budget is for items parked by a budget, not a {item.kind}")
        resolution: dict[str, Any] = {"action": action, "by": by}
        if answer:
            resolution["answer"] = answer[:20000]
        if reason:
            resolution["reason"] = reason[:500]
        if budget is not None:
            resolution["budget"] = budget
        with anyio.CancelScope(shield=True):
            done = await anyio.to_thread.run_sync(
                functools.partial(self.store.resolve, item_id, resolution, now=self.clock()))
        if done is None:
            raise InboxError(f"inbox item {item_id} was resolved meanwhile")
        self.bus.publish(InboxResolved(session_id=done.session_id, agent=done.agent or None,
                                       item_id=done.id, kind=done.kind, action=action, by=by))
        waiter = self._waiters.get(item_id)
        if waiter is not None:
            waiter.set()
        elif done.session_id and action != "dismiss" and self.resumer is not None \
                and done.kind in ("approval", "question", "parked", "failed"):
            task = None
            if done.kind == "failed":
                task = ("Your last task ended with an error: "
                        f"{done.details.get('error') or done.reason}. Continue it.")
            await self.resumer(done.session_id, task)
        return done

    # Background: expiry and landings.
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Expire approvals past `approvals.expire_after_s` and add landings that need
        attention, until cancelled."""
        task_status.started()
        next_scan = 0.0
        while True:
            now = self.clock()
            if now >= next_scan:
                await self.scan_landings()
                next_scan = now + LANDING_SCAN_S
            wait_s = min(LANDING_SCAN_S, await self.expire_due(now))
            self._wake = anyio.Event()
            with anyio.move_on_after(max(0.05, wait_s)):
                await self._wake.wait()

    async def expire_due(self, now: float) -> float:
        """Expire what is due; seconds until the next expiry (inf: none)."""
        limit = self.settings.approvals.expire_after_s
        if limit <= 0:
            return math.inf
        soonest = math.inf
        for item in self.store.items():
            if item.kind != "approval" or item.escalated:
                continue
            due = item.created + limit
            if due > now:
                soonest = min(soonest, due - now)
                continue
            why = f"no answer within {limit:g} s (approvals.expire_after_s)"
            if self.settings.approvals.on_expiry == "deny":
                try:
                    await self.resolve(item.id, "deny", reason=why, by="expiry")
                except InboxError:
                    continue
            else:
                escalated = await anyio.to_thread.run_sync(self.store.escalate, item.id)
                if escalated is not None:
                    self._tell(escalated)
        return soonest

    async def scan_landings(self) -> None:
        """Add each landing in `needs_attention` once (a dismissed one is not added again
        until its record changes), and clear the items of those that moved on."""
        try:
            found = await anyio.to_thread.run_sync(self._needing_attention)
        except (OSError, SquaddError) as exc:
            log.warning("landings not scanned", error=str(exc))
            return
        keys = set()
        for session_id, agent, why, updated in found:
            mark = hashlib.sha256(f"{updated}\0{why}".encode()).hexdigest()[:12]
            key = f"landing:{session_id}:{mark}"  # a new episode is a new item
            keys.add(key)
            if self.store.by_key(key) is None:
                await self.add("landing", why, agent=agent, session_id=session_id, key=key,
                               details={"next": f"squadd land {session_id}"})
        for item in self.store.items():
            if item.kind == "landing" and item.key not in keys:
                try:
                    await self.resolve(item.id, "dismiss", reason="the landing moved on",
                                       by="squadd")
                except InboxError:
                    continue

    def _needing_attention(self) -> list[tuple[str, str, str, str]]:
        return [(view.session_id, view.agent, view.message or "the landing needs a person",
                 view.updated)
                for view in workspace_records.load_all(self.layout)
                if view.state == "needs_attention"]


def _call_key(session_id: str, call_id: str) -> str:
    return f"call:{session_id}:{call_id}"


def _new_id() -> str:
    return "i" + secrets.token_hex(4)
