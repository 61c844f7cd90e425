"""`squadd serve --ui` and `squadd ui` with a real daemon: the dashboard listens on loopback,
`squadd ui` prints the URL that carries its token, and without that token nothing answers."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.slow


def test_serve_ui_and_squadd_ui_print_a_url_that_opens_the_dashboard(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    with DaemonProcess.in_new_repo(tmp_path, model_server.url, config=FAST_CONFIG,
                                   extra_args=("--ui",)) as daemon:
        shown = daemon.squadd("ui", "--json")
        assert shown.returncode == 0, shown.stderr
        answer = json.loads(shown.stdout)
        url, link = answer["url"], answer["link"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/ui/")
        token = link.partition("?token=")[2]
        assert link == f"{url}?token={token}" and len(token) >= 32
        plain = daemon.squadd("ui")
        assert plain.stdout.strip() == link
        opened = tmp_path / "opened.txt"
        browser = tmp_path / "browser.sh"
        browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > {opened}\n'
                           f'tr "\\0" "\\n" < /proc/$$/cmdline >> {opened}\n',
                           encoding="utf-8")
        browser.chmod(0o755)
        daemon.env["BROWSER"] = str(browser)
        assert daemon.squadd("ui", "--open").returncode == 0
        argv = opened.read_text(encoding="utf-8")
        assert token not in argv  # neither in the arguments nor on the process's command line
        handoff = daemon.layout.ui_handoff
        assert handoff.as_uri() in argv.splitlines()
        assert handoff.stat().st_mode & 0o777 == 0o600
        assert handoff.parent.stat().st_mode & 0o777 == 0o700
        assert link.replace("&", "&amp;") in handoff.read_text(encoding="utf-8")
        assert not daemon.layout.token_file.exists()  # the UI token lives in memory only

        without = httpx.get(url, timeout=10)
        assert without.status_code == 401 and token not in without.text
        assert httpx.get(url.replace("/ui/", "/v1/health"), timeout=10).status_code == 404
        page = httpx.get(link, timeout=10)
        assert page.status_code == 200 and "<title>squadd</title>" in page.text
        model_server.script(OpenAIServer.text_turn("hello back"))
        routed = daemon.client.route("say hello", "lead")
        state = httpx.get(f"{url}api/state", headers={"x-squadd-token": token}, timeout=10)
        assert state.status_code == 200
        assert routed["session_id"] in [s["session_id"] for s in state.json()["sessions"]]


def test_squadd_ui_says_how_to_turn_the_dashboard_on(daemon: DaemonProcess) -> None:
    shown = daemon.squadd("ui")
    assert shown.returncode == 1
    assert "serves no dashboard" in shown.stderr and "squadd serve --ui" in shown.stderr
