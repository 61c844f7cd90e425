"""`squadd top` through Textual's pilot, against a real daemon running three routed tasks: the
sessions tree with the nested route, a tool's progress, the agent filter, a session's
transcript, and an approval answered with a key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from squadd.cli._top_app import TopApp
from squadd.daemon.client import AsyncDaemonClient
from tests.support.busy_squad import TASKS, busy_daemon
from tests.support.daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.daemon(
    build=lambda tmp_path, url: busy_daemon(tmp_path))]

WAIT_S = 30.0


def rows(app: TopApp, table: str) -> list[list[str]]:
    widget = app.query_one(f"#{table}", DataTable)
    return [[str(cell) for cell in widget.get_row_at(index)] for index in range(widget.row_count)]


async def until(pilot: Pilot[None], holds: Callable[[], bool], what: str) -> None:
    """Let the app run until `holds()`; fail naming `what` after WAIT_S."""
    with anyio.fail_after(WAIT_S):
        while not holds():
            await pilot.pause(0.05)
    assert holds(), what


async def test_top_shows_the_squad_live_filters_opens_and_approves(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    app = TopApp(AsyncDaemonClient(daemon.layout, timeout=30.0))
    async with app.run_test(size=(180, 40)) as pilot:
        pool_line = app.query_one("#pool", Static)
        await until(pilot, lambda: str(pool_line.render()).startswith("live · pool 0/8"),
                    "the event stream is followed")
        for task, agent in TASKS:
            await anyio.to_thread.run_sync(
                lambda t=task, a=agent: daemon.client.route(t, a, wait=False))

        def building() -> bool:
            return any(r[0] == "  └ backend" and r[6].startswith("work_build 50%")
                       for r in rows(app, "sessions"))

        await until(pilot, building, "backend's tool at half-way, under lead")
        await until(pilot, lambda: len(rows(app, "approvals")) == 1, "tester's approval")
        names = [r[0].strip() for r in rows(app, "sessions")]
        assert names.index("└ backend") == names.index("lead") + 1
        assert sorted(n for n in names if not n.startswith("└")) == ["lead", "tester", "writer"]
        backend = next(r for r in rows(app, "sessions") if r[0].endswith("backend"))
        assert "building orders API: step 1 of 2" in backend[6]
        assert rows(app, "approvals")[0][:2] == ["tester", "work_publish"]

        await pilot.press("f")  # agents in name order: backend first
        assert [r[0].strip() for r in rows(app, "sessions")] == ["└ backend"]
        for _ in range(2):
            await pilot.press("f")
        assert app.agent == "tester" and {r[0] for r in rows(app, "sessions")} == {"tester"}
        assert "agent tester" in str(app.query_one("#pool", Static).render())

        await pilot.press("a")
        resolved = await anyio.to_thread.run_sync(lambda: list(daemon.client.events(
            types=["approval.resolved"], recent=5, follow=False)))
        assert [(e["approved"], e["reason"]) for e in resolved] == [(True, "from squadd top")]
        await until(pilot, lambda: rows(app, "sessions")[0][1] == "idle", "tester finished")
        assert rows(app, "approvals") == []

        await pilot.press("escape")
        assert app.agent is None and len(rows(app, "sessions")) == 4
        (tmp_path / "release").write_text("go", encoding="utf-8")
        await until(pilot, lambda: all(r[1] == "idle" for r in rows(app, "sessions")),
                    "every session at rest")
        # the replay model has no price: its cost is unknown, never $0
        await until(pilot, lambda: {r[8] for r in rows(app, "sessions")} == {"unknown"},
                    "costs shown")
        assert "today unknown" in str(app.query_one("#pool", Static).render())

        app.query_one("#sessions", DataTable).focus()
        app.query_one("#sessions", DataTable).move_cursor(row=names.index("└ backend"))
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.query("#transcript").first() is not None
                    if app.screen is not app.screen_stack[0] else False, "the transcript")
        shown = str(app.screen.query_one("#transcript", Static).render())
        assert "Orders API built." in shown and "work_build" in shown
        assert "backend" in str(app.screen.query_one("#transcript-title", Static).render())
        await pilot.press("escape")
        assert app.screen is app.screen_stack[0]
