"""SessionPool: which sessions exist, what state each is in, and who holds the slots.

Admission is synchronous and exact: a route takes a free slot, or a place in the bounded
admission queue, or fails at once with `PoolFullError`. A session waiting on a child route
gives its slot back and takes one again ahead of new work. Sessions at rest are reaped after
`pool.idle_timeout_s`; ended sessions are remembered (bounded) so their answers can be collected.
Every state change is an `agent.state` event.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from squadd.config import PoolSettings
from squadd.contracts.events import (
    AgentIdle,
    AgentStateChanged,
    EventSink,
    PoolAtCapacity,
    PoolEmpty,
    RouteQueued,
)
from squadd.contracts.sessions import LIVE_STATES, PoolTotals, SessionState, SessionView
from squadd.errors import PoolFullError, RouteError
from squadd.runtime.session_info import SessionInfo
from squadd.runtime.slots import PrioritySlots, SlotClass, SlotLimiter, SlotTicket
from squadd.tools.base import ToolSet

RESTING_STATES: frozenset[str] = frozenset({"idle", "error", "interrupted"})
_TASK_PREVIEW = 500


@dataclass(slots=True, eq=False)
class SessionRecord:
    """The pool's record of one session. It holds no messages: those live in the transcript."""

    info: SessionInfo
    state: SessionState = "queued"
    created_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    created: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    input_tokens: int = 0
    output_tokens: int = 0
    answer: str | None = None
    error: str | None = None
    holds_slot: bool = False
    scope: anyio.CancelScope | None = None
    """The cancel scope of the task now running (set while live)."""
    finished: anyio.Event | None = None
    """Set when the current task ends."""
    waiting_on: str | None = None
    """The child session this one waits on (it gets the child's slot when the child ends)."""
    tools: ToolSet | None = None
    """The tools its latest task may use (set when the task starts)."""
    worker: str | None = None
    """The cluster worker that claimed it last (None: it runs here)."""
    worker_host: str | None = None
    parked_reason: str | None = None
    """Why it waits on a person (state `parked`), while it does."""
    deadline: anyio.CancelScope | None = None
    """The scope of its task's route timeout (paused while it is parked)."""

    @property
    def session_id(self) -> str:
        return self.info.session_id

    @property
    def agent(self) -> str:
        return self.info.agent

    def view(self, now: float) -> SessionView:
        info = self.info
        return SessionView(
            session_id=info.session_id, agent=info.agent, state=self.state,
            task=info.task[:_TASK_PREVIEW], model=info.model,
            priority="urgent" if info.priority == "urgent" else "normal",
            parent_session_id=info.parent_session_id, requested_by=info.requested_by,
            depth=info.depth, created=self.created_at,
            age_s=round(now - self.created, 3), idle_s=round(now - self.last_activity, 3),
            input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            answer=self.answer, error=self.error, worker=self.worker,
            worker_host=self.worker_host, parked_reason=self.parked_reason,
        )


class SessionPool:
    """Slots, the admission queue, session states, reaping and the memory of ended sessions."""

    def __init__(self, settings: PoolSettings, sink: EventSink, *,
                 limiter: SlotLimiter | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.sink = sink
        self.slots: SlotLimiter = limiter or PrioritySlots(settings.max_concurrent)
        self._clock = clock
        self._records: dict[str, SessionRecord] = {}
        self._resting: OrderedDict[str, SessionRecord] = OrderedDict()
        self._ended: OrderedDict[str, SessionView] = OrderedDict()
        self._waiting = 0
        self._parked = 0
        self._pending: set[SlotTicket] = set()
        """Tickets in line or granted whose route has not collected its slot yet."""
        self.closed = False

    def apply_settings(self, settings: PoolSettings) -> list[str]:
        """Take changed `[pool]` limits while running; the keys it could not apply (a limiter
        of a fixed size, as a cluster's, keeps its `max_concurrent` until a restart)."""
        kept = []
        if settings.max_concurrent != self.settings.max_concurrent:
            if isinstance(self.slots, PrioritySlots):
                self.slots.resize(settings.max_concurrent)
            else:
                kept.append("pool.max_concurrent")
                settings = settings.model_copy(
                    update={"max_concurrent": self.settings.max_concurrent})
        self.settings = settings
        return kept

    # Queries.
    def totals(self) -> PoolTotals:
        slots = self.slots
        return PoolTotals(
            running=slots.in_use, queued=self.queued, waiting=self._waiting,
            idle=len(self._resting), max_concurrent=slots.total,
            max_queued=self.settings.max_queued, parked=self._parked,
        )

    @property
    def queued(self) -> int:
        return self.slots.waiting(SlotClass.URGENT) + self.slots.waiting(SlotClass.NORMAL)

    def get(self, session_id: str) -> SessionRecord | None:
        return self._records.get(session_id)

    def view(self, session_id: str) -> SessionView | None:
        record = self._records.get(session_id)
        if record is not None:
            return record.view(self._clock())
        return self._ended.get(session_id)

    def views(self, *, include_destroyed: bool = False) -> list[SessionView]:
        now = self._clock()
        views = [record.view(now) for record in self._records.values()]
        if include_destroyed:
            views.extend(self._ended.values())
        return views

    def remember(self, view: SessionView) -> None:
        """Keep an ended session's view (e.g. one rebuilt from its transcript), bounded."""
        self._ended[view.session_id] = view
        self._ended.move_to_end(view.session_id)
        while len(self._ended) > self.settings.ended_keep:
            self._ended.popitem(last=False)

    def remember_past(self, views: list[SessionView]) -> None:
        """Keep views of sessions that ended before this daemon started (oldest first), behind
        those kept since and within the same bound; one live again or kept already is skipped."""
        past = [view for view in views
                if view.session_id not in self._records and view.session_id not in self._ended]
        room = self.settings.ended_keep - len(self._ended)
        if room <= 0 or not past:
            return
        kept = OrderedDict((view.session_id, view) for view in past[-room:])
        kept.update(self._ended)
        self._ended = kept

    # Admission and slots.
    def admit(self, record: SessionRecord, priority: str) -> SlotTicket:
        """Give `record` a slot now or a place in line; `PoolFullError` when the line is full."""
        if self.closed:
            raise RouteError("squadd is shutting down and admits no new routes")
        slots = self.slots
        if slots.in_use >= slots.total and self.queued >= self.settings.max_queued:
            totals = self.totals()
            raise PoolFullError(
                f"pool full: {totals.running}/{totals.max_concurrent} sessions running and "
                f"{totals.queued}/{totals.max_queued} routes queued (pool.max_concurrent, "
                "pool.max_queued); try again when squad_status shows free room",
                running=totals.running, queued=totals.queued,
                max_concurrent=totals.max_concurrent, max_queued=totals.max_queued,
            )
        ticket = slots.enqueue(SlotClass.URGENT if priority == "urgent" else SlotClass.NORMAL)
        self._records[record.session_id] = record
        self._resting.pop(record.session_id, None)
        self._ended.pop(record.session_id, None)  # live again: its old view would be listed twice
        record.finished = anyio.Event()
        record.answer = record.error = None
        record.last_activity = self._clock()
        if ticket.granted:
            record.holds_slot = True
            self._set(record, "creating")
            self._check_capacity()
        else:
            self._pending.add(ticket)
            self._set(record, "queued")
            self.sink.publish(RouteQueued(
                session_id=record.session_id, agent=record.agent,
                task=record.info.task[:_TASK_PREVIEW], priority=priority,
                position=self.queued,
            ))
        return ticket

    async def take_slot(self, record: SessionRecord, ticket: SlotTicket,
                        timeout_s: float | None) -> None:
        """Wait (at most `timeout_s`) until `ticket` holds a slot; TimeoutError if none came."""
        if not ticket.granted:
            try:
                with anyio.fail_after(timeout_s):
                    await self.slots.wait(ticket)
            finally:
                self._pending.discard(ticket)
        self._pending.discard(ticket)
        if not record.holds_slot:  # granted now, or while the route was on its way here
            record.holds_slot = True
            self._set(record, "creating")

    def _give_back(self, record: SessionRecord, *, ended: bool) -> None:
        if not record.holds_slot:
            return
        record.holds_slot = False
        parent_id = record.info.parent_session_id
        parent = self._records.get(parent_id) if ended and parent_id else None
        if parent is not None and parent.waiting_on == record.session_id \
                and not parent.holds_slot:
            parent.holds_slot = True  # straight back to the parent that waits on this task
            return
        self.slots.release()

    def conversation_over(self, record: SessionRecord) -> None:
        """The session's task needs no slot any more (its last turn is over and nothing of
        its route's own follows): the slot goes back now, to the parent waiting on it or to
        the next route, while its end records are made durable. It stays live until `finish`."""
        self._give_back(record, ended=True)

    @asynccontextmanager
    async def waiting_on_child(self, session_id: str | None,
                               child_id: str) -> AsyncIterator[None]:
        """While the body runs, the session gives its slot back (state `waiting`).

        When the child's task ends, its slot passes straight to this session; if the child
        never held one, this session gets back in line ahead of every new route. Either way it
        is `active` again on a normal exit.
        """
        record = self._records.get(session_id) if session_id else None
        if record is None or not record.holds_slot or record.state != "active":
            yield
            return
        task = record.finished  # the task that waits: a new Event marks a new task
        self._give_back(record, ended=False)
        record.waiting_on = child_id
        self._waiting += 1
        self._set(record, "waiting")
        try:
            yield
        finally:
            if record.waiting_on == child_id:  # else `finish` ended the wait already
                record.waiting_on = None
                self._waiting -= 1
        if task is None or task.is_set() or record.finished is not task:
            # Its task ended while the child ran (its turn was cut off, or the route came
            # through the API for it): it gets no slot back and stays at rest.
            if record.holds_slot and record.state not in LIVE_STATES:
                self._give_back(record, ended=False)
            return
        if not record.holds_slot:
            await self._slot_back(record)
        self._set(record, "active")

    async def _slot_back(self, record: SessionRecord) -> None:
        """Take a slot again for a session that gave its own back, ahead of new work."""
        ticket = self.slots.enqueue(SlotClass.RETURNING)
        self._pending.add(ticket)
        try:
            await self.slots.wait(ticket)
        finally:
            self._pending.discard(ticket)
        record.holds_slot = True

    @asynccontextmanager
    async def parked(self, session_id: str, reason: str) -> AsyncIterator[None]:
        """While the body runs, the session waits on a person: it gives its slot back (state
        `parked`) and its route timeout, and its callers' (who wait on it), stand still. On
        a normal exit it takes a slot again ahead of new work and is `active`."""
        record = self._records.get(session_id)
        if record is None or record.state not in ("active", "creating"):
            yield
            return
        paused = self._pause_deadlines(record)
        had_slot = record.holds_slot
        self._give_back(record, ended=False)
        record.parked_reason = reason
        self._parked += 1
        self._set(record, "parked")
        try:
            yield
        finally:
            self._parked -= 1
            record.parked_reason = None
            now = anyio.current_time()
            for scope, left in paused:
                scope.deadline = now + left
        if had_slot and not record.holds_slot:
            await self._slot_back(record)
        self._set(record, "active")

    def _pause_deadlines(self, record: SessionRecord) -> list[tuple[anyio.CancelScope, float]]:
        """Stop the route timeouts of `record` and of every session waiting on it."""
        paused: list[tuple[anyio.CancelScope, float]] = []
        now = anyio.current_time()
        seen: set[str] = set()
        current: SessionRecord | None = record
        while current is not None and current.session_id not in seen:
            seen.add(current.session_id)
            scope = current.deadline
            if scope is not None and scope.deadline != float("inf"):
                paused.append((scope, max(0.0, scope.deadline - now)))
                scope.deadline = float("inf")
            parent = current.info.parent_session_id
            current = self._records.get(parent) if parent else None
        return paused

    # States.
    def _set(self, record: SessionRecord, state: SessionState) -> None:
        previous = record.state
        record.state = state
        self.sink.publish(AgentStateChanged(session_id=record.session_id, agent=record.agent,
                                            state=state, previous=previous))

    def activate(self, record: SessionRecord) -> None:
        record.last_activity = self._clock()
        self._set(record, "active")

    def touch(self, record: SessionRecord, *, input_tokens: int = 0,
              output_tokens: int = 0) -> None:
        record.last_activity = self._clock()
        record.input_tokens += input_tokens
        record.output_tokens += output_tokens

    def finish(self, record: SessionRecord, state: SessionState, *, answer: str | None = None,
               error: str | None = None) -> None:
        """The task ended: give the slot back and rest in `state` (idle, error, interrupted)."""
        if state not in RESTING_STATES:
            raise ValueError(f"a task cannot end in state {state!r}")
        self._give_back(record, ended=True)
        if record.waiting_on is not None:
            # A child it waited on must not hand its slot to a task that has ended.
            record.waiting_on = None
            self._waiting -= 1
        record.answer, record.error = answer, error
        record.last_activity = self._clock()
        record.scope = None
        self._set(record, state)
        if state == "idle":
            self.sink.publish(AgentIdle(session_id=record.session_id, agent=record.agent))
        self._resting[record.session_id] = record
        self._resting.move_to_end(record.session_id)
        if record.finished is not None:
            record.finished.set()
        while len(self._resting) > self.settings.max_idle:
            self.destroy(next(iter(self._resting.values())))
        if self.slots.in_use == 0 and self.queued == 0 and self._waiting == 0:
            self.sink.publish(PoolEmpty())

    def abandon(self, record: SessionRecord) -> None:
        """A route that never started (its queue wait timed out or was cancelled)."""
        self._give_back(record, ended=True)
        if record.finished is not None:
            record.finished.set()
        if record.state in LIVE_STATES:
            record.error = record.error or "never started"
            self._set(record, "destroyed")
        self._records.pop(record.session_id, None)
        self._resting.pop(record.session_id, None)

    def withdraw(self, record: SessionRecord, ticket: SlotTicket) -> None:
        """A route admitted that will not run after all: its ticket leaves the line (or gives
        back the slot it got) and the record is dropped."""
        if not record.holds_slot:
            self.slots.cancel(ticket)
        self._pending.discard(ticket)
        self.abandon(record)

    def destroy(self, record: SessionRecord) -> None:
        """Forget a session at rest: it leaves the pool, its view is remembered (bounded)."""
        if record.state in LIVE_STATES:
            raise ValueError(f"session {record.session_id} is {record.state}, not at rest")
        self._records.pop(record.session_id, None)
        self._resting.pop(record.session_id, None)
        last_state = record.state
        self._set(record, "destroyed")
        view = record.view(self._clock())
        if last_state == "error" and view.error is None:
            view.error = "ended in error"
        self.remember(view)

    def reap(self) -> int:
        """Destroy sessions that have rested longer than `pool.idle_timeout_s`; return how many."""
        limit = self._clock() - self.settings.idle_timeout_s
        reaped = 0
        while self._resting:
            record = next(iter(self._resting.values()))
            if record.last_activity > limit:
                break
            self.destroy(record)
            reaped += 1
        return reaped

    def _check_capacity(self) -> None:
        slots = self.slots
        if slots.in_use == slots.total:
            self.sink.publish(PoolAtCapacity(running=slots.in_use, queued=self.queued,
                                             max_concurrent=slots.total))

    def invariant_violations(self) -> list[str]:
        """What is wrong with the slot accounting now (empty when all is well).

        Slots in use are exactly those held by sessions plus those granted to routes that have
        not collected them yet; no session at rest holds a slot or waits on a child; the
        `waiting` count is the number of sessions waiting on one. (With a limiter shared
        with other processes only the local rules are checked.)
        """
        problems: list[str] = []
        records = list(self._records.values())
        holders = [r for r in records if r.holds_slot]
        granted = sum(1 for ticket in self._pending if ticket.granted)
        if isinstance(self.slots, PrioritySlots):
            in_use = self.slots.in_use
            if in_use != len(holders) + granted:
                problems.append(
                    f"{in_use} slots in use, but {len(holders)} sessions hold one "
                    f"({', '.join(r.session_id for r in holders) or 'none'}) and {granted} "
                    "granted slots wait to be taken")
            if in_use > self.slots.total:
                problems.append(f"{in_use} slots in use of {self.slots.total}")
        for record in records:
            if record.state in RESTING_STATES or record.state == "destroyed":
                if record.holds_slot:
                    problems.append(f"session {record.session_id} is {record.state} but holds "
                                    "a slot")
                if record.waiting_on is not None:
                    problems.append(f"session {record.session_id} is {record.state} but waits "
                                    f"on {record.waiting_on}")
        waiting = sum(1 for r in records if r.waiting_on is not None)
        if waiting != self._waiting:
            problems.append(f"{self._waiting} sessions counted as waiting, {waiting} wait on "
                            "a child")
        return problems

    def check_invariants(self) -> None:
        """Raise `AssertionError` naming each broken rule of `invariant_violations`."""
        problems = self.invariant_violations()
        if problems:
            raise AssertionError("session pool invariants broken: " + "; ".join(problems))

    def live(self) -> list[SessionRecord]:
        """Sessions with a task in hand."""
        return [r for r in self._records.values() if r.state in LIVE_STATES]
