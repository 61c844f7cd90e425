"""Slots: the limit on sessions running at once, handed out by priority.

A released slot goes straight to the next waiter: first a session taking its slot back after
it waited on a child route, then urgent routes, then normal ones; first come, first served
within each class. `SlotLimiter` is the seam (a limiter shared between processes can come
later); `PrioritySlots` is the in-process one.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Protocol

import anyio


class SlotClass(enum.IntEnum):
    """Who gets a released slot first (lowest value first)."""

    RETURNING = 0
    """A session taking its slot back after waiting on a child route."""
    URGENT = 1
    NORMAL = 2


class SlotTicket:
    """One place in line for a slot."""

    __slots__ = ("_event", "granted", "klass")

    def __init__(self, klass: SlotClass):
        self.klass = klass
        self.granted = False
        self._event = anyio.Event()


class SlotLimiter(Protocol):
    """How the pool limits running sessions."""

    @property
    def total(self) -> int: ...

    @property
    def in_use(self) -> int: ...

    def waiting(self, klass: SlotClass | None = None) -> int:
        """Tickets in line (of one class, or all)."""

    def try_acquire(self) -> bool:
        """Take a free slot now, if one is free and nobody is in line."""

    def enqueue(self, klass: SlotClass) -> SlotTicket:
        """Get in line (synchronous, so admission decisions are exact)."""

    async def wait(self, ticket: SlotTicket) -> None:
        """Wait until `ticket` holds a slot. Cancelled: leaves the line (or gives the slot back)."""

    def cancel(self, ticket: SlotTicket) -> None:
        """Give `ticket` up: it leaves the line, or gives back the slot it was granted."""

    def release(self) -> None:
        """Give a slot back: to the first in line, else to the free pool."""


class PrioritySlots:
    """`total` slots with three FIFO lines, served RETURNING, URGENT, NORMAL."""

    def __init__(self, total: int):
        if total < 1:
            raise ValueError(f"a pool needs at least one slot, got total={total}")
        self._total = total
        self._in_use = 0
        self._lines: tuple[deque[SlotTicket], ...] = tuple(deque() for _ in SlotClass)

    @property
    def total(self) -> int:
        # After a shrink, the slots still held count until their sessions give them back.
        return max(self._total, self._in_use)

    def resize(self, total: int) -> None:
        """Make it `total` slots (`pool.max_concurrent` changed while the daemon runs): more
        go to those in line at once; fewer take effect as running sessions give theirs back
        (none is stopped)."""
        if total < 1:
            raise ValueError(f"a pool needs at least one slot, got total={total}")
        self._total = total
        while self._in_use < self._total and self.waiting():
            self._in_use += 1
            self._grant_next()

    def _grant_next(self) -> None:
        for line in self._lines:
            if line:
                ticket = line.popleft()
                ticket.granted = True
                ticket._event.set()
                return

    @property
    def in_use(self) -> int:
        return self._in_use

    def waiting(self, klass: SlotClass | None = None) -> int:
        if klass is not None:
            return len(self._lines[klass])
        return sum(len(line) for line in self._lines)

    def try_acquire(self) -> bool:
        # Free slots and a non-empty line never coexist: release hands slots to waiters.
        if self._in_use < self._total:
            self._in_use += 1
            return True
        return False

    def enqueue(self, klass: SlotClass) -> SlotTicket:
        ticket = SlotTicket(klass)
        if self.try_acquire():
            ticket.granted = True
            ticket._event.set()
        else:
            self._lines[klass].append(ticket)
        return ticket

    async def wait(self, ticket: SlotTicket) -> None:
        if ticket.granted:
            return
        try:
            await ticket._event.wait()
        except BaseException:
            self.cancel(ticket)  # the slot may have arrived as we were cancelled: pass it on
            raise

    def cancel(self, ticket: SlotTicket) -> None:
        if ticket.granted:
            self.release()
        else:
            self._lines[ticket.klass].remove(ticket)

    def release(self) -> None:
        if self._in_use <= self._total and self.waiting():
            self._grant_next()
            return
        if self._in_use <= 0:
            raise RuntimeError("slot released more often than acquired")
        self._in_use -= 1
