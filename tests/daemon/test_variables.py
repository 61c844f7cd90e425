"""`squadd var set` against a real daemon: a tool call waiting for a required secret resumes
once it is set; the value lands only in the 0600 secrets file, never in output or logs."""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from squadd.daemon.client import DaemonClient
from squadd.state.layout import SquadLayout
from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer

SECRET_VALUE = "s3cr3t-value-never-shown"

DEPLOY = """\
description: Deploy with a token
bash: "printenv DEPLOY_TOKEN | wc -c"
tags: [run]
variables:
  - {name: DEPLOY_TOKEN, type: secret, description: the deploy token}
"""


def _write_tools(layout: SquadLayout) -> None:
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "deploy.yaml").write_text(DEPLOY, encoding="utf-8")


pytestmark = [pytest.mark.slow, pytest.mark.daemon(
    config="[tools]\nvariable_timeout_s = 60\n", prepare=_write_tools)]


def test_var_set_answers_a_waiting_call_and_keeps_the_value_private(
        daemon: DaemonProcess) -> None:
    outcome: dict[str, Any] = {}

    def call() -> None:
        with DaemonClient(daemon.layout) as client:
            outcome.update(client.call_tool("deploy", {}))

    with daemon.client.subscribe(types=["variable.*"]) as stream:
        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        requested = next(stream)
        assert requested["type"] == "variable.requested"
        assert (requested["name"], requested["tool"]) == ("DEPLOY_TOKEN", "deploy")
        answered = daemon.squadd("var", "set", "DEPLOY_TOKEN", input=SECRET_VALUE + "\n")
        assert answered.returncode == 0, answered.stderr
        resolved = next(stream)
    thread.join(30)
    assert resolved["type"] == "variable.resolved" and resolved["provided"] is True
    assert "1 waiting call resumed" in answered.stdout
    assert outcome["result_type"] == "success"
    assert outcome["text"].strip() == str(len(SECRET_VALUE) + 1)  # the tool saw the value

    secrets = daemon.layout.repo.parent / "xdg-config" / "squadd" / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert f'DEPLOY_TOKEN="{SECRET_VALUE}"' in secrets.read_text(encoding="utf-8")
    assert SECRET_VALUE not in answered.stdout + answered.stderr
    in_squad = [p for p in daemon.layout.root.rglob("*") if p.is_file()
                and SECRET_VALUE.encode() in p.read_bytes()]
    assert in_squad == []  # not in .squad/: transcripts, logs, config


def test_var_set_without_a_daemon_stores_the_value_directly(tmp_path: Path,
                                                            model_server: OpenAIServer) -> None:
    process = DaemonProcess.in_new_repo(tmp_path, model_server.url)
    done = process.squadd("var", "set", "REGION", "eu-west-1")
    assert done.returncode == 0, done.stderr
    assert "no daemon is running" in done.stdout and "eu-west-1" not in done.stdout
    secrets = tmp_path / "xdg-config" / "squadd" / "secrets"
    assert 'REGION="eu-west-1"' in secrets.read_text(encoding="utf-8")
    bad = process.squadd("var", "set", "not-a-name", "x")
    assert bad.returncode != 0 and "is not a variable name" in bad.stderr
