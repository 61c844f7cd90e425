"""The dashboard's inbox and costs in a real browser (the system's Chromium, driven by
Playwright): a question an agent asks shows in the inbox panel, answering it there resumes the
session, and the session's and the agent's costs show beside their tokens."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.browser import ARTIFACTS
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer

CONFIG = FAST_CONFIG + """
[pricing."openai/test-model"]
input = 1000.0
output = 2000.0
"""
"""Each turn of the test server (11 tokens in, 7 out) costs $0.011 + $0.014 = $0.025."""

pytestmark = [pytest.mark.slow, pytest.mark.daemon(config=CONFIG, extra_args=("--ui",))]


def test_the_inbox_panel_answers_a_question_and_costs_show_beside_tokens(
        daemon: DaemonProcess, model_server: OpenAIServer, page: Any) -> None:
    from playwright.sync_api import expect

    model_server.script(OpenAIServer.tool_call_turn(("squad_ask", {"question": "Which DB?"})),
                        OpenAIServer.text_turn("using postgres"))
    page.wait_for_selector("#link.ok")
    session_id = daemon.client.route("set up the db", "lead", wait=False)["session_id"]
    item = page.locator(".inbox-item.question")
    expect(item).to_have_count(1)
    expect(item.locator(".reason")).to_have_text("Which DB?")
    expect(page.locator("#pool-line")).to_contain_text("1 parked in the inbox")
    expect(page.locator("#costs")).to_contain_text("lead: $0.0250")
    page.screenshot(path=str(ARTIFACTS / "inbox.png"), full_page=True)

    item.locator("input.answer-text").fill("postgres")
    item.locator("button.answer").click()
    expect(page.locator(".inbox-item")).to_have_count(0)
    lead = page.locator(f".session[data-session='{session_id}']")
    expect(lead.locator(".state")).to_have_text("idle")
    expect(lead.locator(".cost")).to_have_text("$0.0500")
    expect(page.locator("#costs")).to_contain_text("lead: $0.0500")
    expect(page.locator("#no-approvals")).to_be_visible()
    assert daemon.wait_for_state(session_id, {"idle"})["answer"] == "using postgres"
    page.screenshot(path=str(ARTIFACTS / "inbox-answered.png"), full_page=True)
