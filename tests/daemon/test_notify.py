"""Notifications of inbox items: a signed webhook retried with backoff until it answers, a
command fed the item on stdin, each channel recorded once it got through (never sent again),
and a channel that keeps failing left for the next start."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from pathlib import Path

import httpx

from squadd.config import NotifySettings, Settings
from squadd.daemon.notify import Notifier, signature
from squadd.runtime.events import EventBus
from squadd.runtime.inbox import Inbox
from squadd.runtime.pool import SessionPool
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad


def _inbox(tmp_path: Path, settings: Settings) -> Inbox:
    tmp_path.mkdir(exist_ok=True)
    layout = SquadLayout.at(init_squad(tmp_path).squad_dir)
    bus = EventBus()
    inbox = Inbox(layout, settings, bus, SessionPool(settings.pool, bus))
    inbox.store.load()
    return inbox


async def test_the_webhook_is_signed_retried_and_sent_once(tmp_path: Path) -> None:
    settings = Settings(notify=NotifySettings(webhook="http://127.0.0.1:1/hook", attempts=4,
                                              backoff_s=0))
    inbox = _inbox(tmp_path, settings)
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503 if len(seen) < 3 else 204)

    notifier = Notifier(settings, inbox, transport=httpx.MockTransport(answer),
                        secret=lambda: "s3cret")
    item = await inbox.add("question", "Which DB?", agent="lead", session_id="s1")
    assert await notifier.deliver(item.id) == ["webhook"]
    assert len(seen) == 3  # two 503s, then through
    body = seen[-1].content
    assert json.loads(body)["item"]["id"] == item.id
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert seen[-1].headers["x-squadd-signature"] == expected == signature("s3cret", body)
    # recorded: a new process (a restart) sends nothing again
    again = _inbox(tmp_path, settings)
    later = Notifier(settings, again, transport=httpx.MockTransport(answer),
                     secret=lambda: "s3cret")
    assert await later.deliver(item.id) == [] and len(seen) == 3


async def test_the_command_gets_the_item_on_stdin_and_a_failing_one_is_left_pending(
        tmp_path: Path) -> None:
    heard = tmp_path / "heard.json"
    good = [sys.executable, "-c",
            f"import sys; open({str(heard)!r}, 'w').write(sys.stdin.read())"]
    settings = Settings(notify=NotifySettings(command=good, attempts=2, backoff_s=0))
    inbox = _inbox(tmp_path / "repo", settings)
    item = await inbox.add("parked", "budget: per_day_usd", agent="lead", session_id="s1")
    assert await Notifier(settings, inbox).deliver(item.id) == ["command"]
    assert json.loads(heard.read_text())["item"]["reason"] == "budget: per_day_usd"

    failing = Settings(notify=NotifySettings(
        command=[sys.executable, "-c", "import sys; sys.exit(3)"], attempts=2, backoff_s=0))
    other = await inbox.add("failed", "boom", agent="lead", session_id="s2")
    assert await Notifier(failing, inbox).deliver(other.id) == []
    stored = inbox.get(other.id)
    assert stored is not None and stored.notified == []  # the next start tries again
