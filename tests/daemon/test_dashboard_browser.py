"""The dashboard in a real browser: the system's Chromium, driven by Playwright, against a real
daemon running three routed tasks from a scripted model. The page shows the sessions tree, a
tool's progress and an approval that a click on Approve resolves; its event feed stays
windowed while 1,000 events stream. Screenshots land in `test-artifacts/dashboard/` (or
`$SQUADD_TEST_ARTIFACTS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ARTIFACTS
from tests.support.busy_squad import TASKS, busy_daemon
from tests.support.daemon_process import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.daemon(
    build=lambda tmp_path, url: busy_daemon(tmp_path, "--ui"))]

FEED_WINDOW = 200
"""The page's FEED_WINDOW (app.js): event rows it keeps."""



def test_the_page_shows_the_squad_working_and_approve_resolves_the_approval(
        daemon: DaemonProcess, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.wait_for_selector("#link.ok")
    assert "token=" not in page.url  # dropped from the address bar once read
    for task, agent in TASKS:
        daemon.client.route(task, agent, wait=False)

    nested = page.locator("#sessions > li > ul.tree .session[data-session]")
    expect(nested.locator(".agent")).to_have_text("backend")
    root_agents = page.locator("#sessions > li > .session .agent")
    expect(root_agents).to_have_count(3)
    assert sorted(root_agents.all_text_contents()) == ["lead", "tester", "writer"]
    tool = nested.locator(".tool")
    expect(tool.locator(".tool-name")).to_have_text("work_build")
    expect(tool.locator(".tool-message")).to_have_text("building orders API: step 1 of 2")
    assert tool.locator("progress").evaluate("bar => bar.value") == 0.5
    approval = page.locator(".approval")
    expect(approval).to_have_count(1)
    expect(approval).to_contain_text("tester")
    # backend runs; tester waits on its approval in the inbox and lead on backend: neither
    # holds a slot
    expect(page.locator("#slots .slot.busy")).to_have_count(1)
    expect(page.locator(".session:has(.agent:text-is('tester')) .state")).to_have_text("parked")
    expect(page.locator("#decisions")).to_contain_text("Release notes live in CHANGELOG.md")
    page.screenshot(path=str(ARTIFACTS / "working.png"), full_page=True)

    approval.locator("button.approve").click()
    expect(page.locator(".approval")).to_have_count(0)
    # The row goes once the POST is answered; the event may be published a moment later:
    # wait for it (or find it among the recent ones), bounded.
    with daemon.follow_events(30, types=["approval.resolved"], recent=5) as resolved:
        first = next(resolved)
    assert first["approved"] is True
    tester = page.locator(".session:has(.agent:text-is('tester'))")
    expect(tester.locator(".state")).to_have_text("idle")
    expect(tester.locator(".turns")).to_have_text("2 turns")

    (tmp_path / "release").write_text("go", encoding="utf-8")
    lead = page.locator("#sessions > li > .session:has(.agent:text-is('lead'))")
    expect(lead.locator(".state")).to_have_text("idle")
    expect(nested.locator(".tool")).to_have_count(0)
    expect(page.locator("#tokens-chart polyline")).to_have_count(4)
    expect(page.locator("#tokens-chart .legend")).to_contain_text("lead: 2900 tokens")

    nested.click()
    expect(page.locator("#transcript-panel")).to_be_visible()
    expect(page.locator("#transcript")).to_contain_text("orders API built")
    page.screenshot(path=str(ARTIFACTS / "done.png"), full_page=True)


def test_the_feed_stays_windowed_while_a_thousand_events_stream(
        daemon: DaemonProcess, page: Any) -> None:
    page.wait_for_selector("#link.ok")
    result = daemon.client.call_tool("work_chatter", {"count": 1000})
    assert result["result_type"] == "success"
    page.wait_for_function("() => window.squadd && window.squadd.feedRows >= 1002")
    rows = page.locator("#feed > li").count()
    assert rows == FEED_WINDOW
    assert page.evaluate("() => document.querySelectorAll('#feed li').length") <= FEED_WINDOW
    newest = page.locator("#feed > li").first.get_attribute("data-seq")
    assert newest is not None and int(newest) > 1000  # the latest events, not the first ones
    page.screenshot(path=str(ARTIFACTS / "feed.png"), full_page=True)

