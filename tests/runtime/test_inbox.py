"""The inbox: items kept in an append-only log that a new process replays, one item per key,
approvals that expire (denied or escalated), landings that need attention found on their
records, failed sessions, and a hook told of each new item once."""

from __future__ import annotations

import pytest

from squadd.config import ApprovalsSettings, Settings
from squadd.contracts.routes import RouteRequest
from squadd.contracts.workspaces import WorkspaceView
from squadd.runtime.events import EventBus
from squadd.runtime.inbox import Inbox, InboxError
from squadd.runtime.pool import SessionPool
from squadd.runtime.runtime import SquadRuntime
from squadd.state.inbox_items import InboxStore
from squadd.state.layout import SquadLayout
from squadd.workspaces import records
from tests.runtime.scripted import Gauge, script, text


def _inbox(layout: SquadLayout, settings: Settings | None = None,
           now: list[float] | None = None) -> Inbox:
    settings = settings or Settings()
    bus = EventBus()
    clock = (lambda: now[0]) if now is not None else None
    inbox = Inbox(layout, settings, bus, SessionPool(settings.pool, bus),
                  **({"clock": clock} if clock else {}))
    inbox.store.load()
    return inbox


async def test_items_are_replayed_by_a_new_process_and_a_key_is_added_once(
        layout: SquadLayout) -> None:
    inbox = _inbox(layout)
    told: list[str] = []
    inbox.add_hook(lambda item: told.append(item.id))
    first = await inbox.add("failed", "boom", agent="lead", session_id="s1", key="failed:s1")
    again = await inbox.add("failed", "boom again", agent="lead", session_id="s1",
                            key="failed:s1")
    assert again.id == first.id and told == [first.id]  # one item, told once
    await inbox.resolve(first.id, "dismiss", reason="seen")
    with open(layout.human_inbox, "a") as torn:  # a kill mid-append
        torn.write('{"op": "add", "item": {"id"')
    store = InboxStore(layout)
    store.load()
    (item,) = store.items(include_resolved=True)
    assert item.id == first.id and not item.open
    assert item.resolution == {"action": "dismiss", "by": "person", "reason": "seen"}
    assert store.items() == []
    with pytest.raises(InboxError, match="already resolved"):
        await inbox.resolve(first.id, "dismiss")


async def test_an_expired_approval_is_denied_or_escalated_as_settings_say(
        layout: SquadLayout) -> None:
    now = [1000.0]
    deny = _inbox(layout, Settings(approvals=ApprovalsSettings(expire_after_s=60)), now)
    item = await deny.add("approval", "Run deploy?", session_id="s1", key="call:s1:c1")
    now[0] = 1059.0
    assert await deny.expire_due(now[0]) == pytest.approx(1.0)
    assert deny.get(item.id).open  # type: ignore[union-attr]
    now[0] = 1060.0
    await deny.expire_due(now[0])
    resolved = deny.get(item.id)
    assert resolved is not None and resolved.resolution is not None
    assert resolved.resolution["action"] == "deny" and resolved.resolution["by"] == "expiry"

    escalate = _inbox(layout, Settings(approvals=ApprovalsSettings(
        expire_after_s=60, on_expiry="escalate")), now)
    told: list[bool] = []
    escalate.add_hook(lambda i: told.append(i.escalated))
    waiting = await escalate.add("approval", "Run it?", session_id="s2", key="call:s2:c1")
    now[0] = 2000.0
    await escalate.expire_due(now[0])
    await escalate.expire_due(now[0])  # escalated once, not at every pass
    still = escalate.get(waiting.id)
    assert still is not None and still.open and still.escalated
    assert told == [False, True]


async def test_a_landing_that_needs_attention_comes_and_goes_with_its_record(
        layout: SquadLayout) -> None:
    inbox = _inbox(layout)
    record = WorkspaceView(session_id="s9", agent="fenster", branch="squad/fenster/s9",
                           target="main", base_commit="abc", path=str(layout.repo),
                           state="needs_attention", message="repairs ran out: tests fail")
    records.save(layout, record)
    await inbox.scan_landings()
    await inbox.scan_landings()
    (item,) = inbox.items()
    assert item.kind == "landing" and item.agent == "fenster"
    assert item.reason == "repairs ran out: tests fail"
    await inbox.resolve(item.id, "dismiss")
    await inbox.scan_landings()  # dismissed: not added again while the record is unchanged
    assert inbox.items() == []
    records.save(layout, record.model_copy(update={"message": "still failing"}))
    await inbox.scan_landings()  # the record changed: it needs a person again
    (again,) = inbox.items()
    assert again.reason == "still failing"
    records.save(layout, record.model_copy(update={"state": "landed"}))
    await inbox.scan_landings()
    assert inbox.items() == []


async def test_a_failed_session_goes_to_the_inbox_and_resume_continues_it(
        layout: SquadLayout) -> None:
    gauge = Gauge(script([text("recovered")]), crash_agents=frozenset({"lead"}))
    async with SquadRuntime(layout, Settings(), gauge) as runtime:
        failed = await runtime.route(RouteRequest(target_agent="lead", task="do it"))
        assert not failed.ok
        (item,) = runtime.inbox.items()
        assert item.kind == "failed" and item.session_id == failed.session_id
        assert item.actions == ["resume", "dismiss"] and "exploded" in item.reason
        gauge.crash_agents = frozenset()
        idle = runtime.bus.subscribe(types=["agent.idle"])
        await runtime.inbox.resolve(item.id, "resume")
        assert await idle.get(within=10) is not None
        view = await runtime.session(failed.session_id or "")
        assert view is not None and view.answer == "recovered"


