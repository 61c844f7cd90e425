"""PrioritySlots: the bound, the order a released slot is handed out in, and cancellation."""

from __future__ import annotations

import anyio
import pytest

from squadd.runtime.slots import PrioritySlots, SlotClass


async def test_free_slots_are_taken_at_once_then_tickets_wait() -> None:
    slots = PrioritySlots(2)
    assert slots.try_acquire() and slots.try_acquire()
    assert not slots.try_acquire()
    ticket = slots.enqueue(SlotClass.NORMAL)
    assert not ticket.granted and slots.waiting() == 1
    slots.release()
    assert ticket.granted and slots.in_use == 2 and slots.waiting() == 0
    await slots.wait(ticket)  # already granted: returns at once


async def test_released_slot_goes_returning_then_urgent_then_normal_fifo() -> None:
    slots = PrioritySlots(1)
    assert slots.try_acquire()
    order: list[str] = []
    tickets = [("n1", slots.enqueue(SlotClass.NORMAL)), ("u1", slots.enqueue(SlotClass.URGENT)),
               ("n2", slots.enqueue(SlotClass.NORMAL)), ("r1", slots.enqueue(SlotClass.RETURNING)),
               ("u2", slots.enqueue(SlotClass.URGENT))]

    async def holder(name: str, ticket: object) -> None:
        await slots.wait(ticket)  # type: ignore[arg-type]
        order.append(name)
        await anyio.sleep(0.001)
        slots.release()

    async with anyio.create_task_group() as tg:
        for name, ticket in tickets:
            tg.start_soon(holder, name, ticket)
        await anyio.wait_all_tasks_blocked()  # every holder waits in its line
        slots.release()
    assert order == ["r1", "u1", "u2", "n1", "n2"]
    assert slots.in_use == 0


async def test_cancelled_waiter_leaves_the_line() -> None:
    slots = PrioritySlots(1)
    assert slots.try_acquire()
    ticket = slots.enqueue(SlotClass.NORMAL)
    with anyio.move_on_after(0.01):
        await slots.wait(ticket)
    assert slots.waiting() == 0
    slots.release()
    assert slots.in_use == 0


def test_release_without_acquire_is_a_bug_not_a_free_slot() -> None:
    slots = PrioritySlots(1)
    with pytest.raises(RuntimeError, match="more often"):
        slots.release()
    with pytest.raises(ValueError, match="at least one slot"):
        PrioritySlots(0)


def test_growing_hands_the_new_slots_to_those_in_line_in_their_order() -> None:
    slots = PrioritySlots(1)
    assert slots.try_acquire()
    normal, urgent, last = (slots.enqueue(SlotClass.NORMAL), slots.enqueue(SlotClass.URGENT),
                            slots.enqueue(SlotClass.NORMAL))
    slots.resize(3)
    assert urgent.granted and normal.granted and not last.granted
    assert slots.in_use == 3 and slots.total == 3 and slots.waiting() == 1


def test_shrinking_stops_no_one_and_takes_effect_as_slots_come_back() -> None:
    slots = PrioritySlots(3)
    assert slots.try_acquire() and slots.try_acquire() and slots.try_acquire()
    waiter = slots.enqueue(SlotClass.URGENT)
    slots.resize(1)
    assert slots.in_use == 3 and slots.total == 3  # the held slots still count
    slots.release()
    assert not waiter.granted and slots.in_use == 2 and slots.total == 2
    slots.release()
    assert not waiter.granted and slots.in_use == 1 and slots.total == 1
    slots.release()  # now within the new size: the slot goes to the one in line
    assert waiter.granted and slots.in_use == 1
    assert not slots.try_acquire()
    with pytest.raises(ValueError, match="at least one slot"):
        slots.resize(0)
