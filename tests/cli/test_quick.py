"""`squadd status` without click (`squadd.cli.quick`): which calls it answers, and that what it
answers is exactly what the click command says, on a real daemon and with none."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from squadd.cli.quick import parse_status
from tests.support.daemon_process import DaemonProcess, clean_env, make_repo
from tests.support.model_servers import OpenAIServer

CLICK_PATH = ("import sys\nfrom squadd.cli.app import main\n"
              "main(sys.argv[1:], prog_name='squadd')\n")
"""The same command, run through the click group (never the quick path)."""


def _both(args: list[str], cwd: Path, env: dict[str, str]
          ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """`python -m squadd ARGS` (the console script's way in) and the click group's answer."""
    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    return (run([sys.executable, "-m", "squadd", *args]),
            run([sys.executable, "-c", CLICK_PATH, *args]))


def _same(quick: subprocess.CompletedProcess[str],
          click: subprocess.CompletedProcess[str]) -> None:
    assert (quick.returncode, _steady(quick.stdout), quick.stderr) == (
        click.returncode, _steady(click.stdout), click.stderr)


def _steady(output: str) -> str:
    """The output without what moves between two runs: sessions' ages (the table's AGE and
    IDLE columns, the JSON's `age_s` and `idle_s`), and the padding that follows them."""
    if output.startswith("{"):
        return re.sub(r'"(age_s|idle_s)": [0-9.]+', r'"\1": 0', output)
    return "\n".join(" ".join(re.sub(r"^\d+(s|m\d\ds|h\d\dm|d\d+h)$", "T", cell)
                              for cell in line.split()) for line in output.split("\n"))


def test_plain_status_calls_are_parsed_in_any_order_and_either_form(tmp_path: Path) -> None:
    plain = {"as_json": False, "include_ended": False, "agent": None, "directory": None}
    assert parse_status(["status"]) == plain
    assert parse_status(["status", "--json", "--all"]) == {**plain, "as_json": True,
                                                          "include_ended": True}
    assert parse_status(["status", "--agent", "lead", f"--dir={tmp_path}", "--json"]) == {
        **plain, "agent": "lead", "directory": str(tmp_path), "as_json": True}
    assert parse_status(["status", "--agent=", "--agent", "b"]) == {**plain, "agent": "b"}


@pytest.mark.parametrize("args", [
    [], ["route", "lead", "x"], ["--version"], ["status", "--help"], ["status", "-h"],
    ["status", "--watch"], ["status", "--interval", "2"], ["status", "extra"],
    ["status", "--agent"], ["status", "--agent", "--json"], ["status", "--json=1"],
    ["status", "--dir", "/no/such/folder"], ["status", "--dir="],
    ["status", "--agent", "le\udcffad"],
])
def test_anything_but_a_plain_status_call_goes_to_click(args: list[str]) -> None:
    assert parse_status(args) is None


def test_a_dir_that_is_a_file_goes_to_click(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x", encoding="utf-8")
    assert parse_status(["status", "--dir", str(file)]) is None
    assert parse_status(["status", "--dir", str(tmp_path)])["directory"] == str(tmp_path)  # type: ignore[index]


def test_without_a_daemon_or_a_squad_the_errors_are_clicks_own(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    env = clean_env()
    for cwd, args in ((layout.repo, ["status"]), (layout.repo, ["status", "--json"]),
                      (tmp_path, ["status"]), (tmp_path, ["status", "--dir", str(layout.repo)]),
                      (tmp_path, ["status", "--dir", str(tmp_path / "missing")])):
        quick, click = _both(args, cwd, env)
        _same(quick, click)
        assert quick.returncode != 0 and quick.stderr.startswith(("Error:", "Usage:"))
    quick, _ = _both(["status"], layout.repo, env)
    assert quick.stderr == (f"Error: no squadd daemon is running for {layout.repo}: start one "
                            "with 'squadd serve'\n")


def _two_routes_done(process: DaemonProcess, server: OpenAIServer) -> None:
    server.script(OpenAIServer.text_turn("Done."), OpenAIServer.text_turn("Also done."))
    assert process.client.route("Check the\nbuild", "lead")["ok"]
    assert process.client.route("Tidy up", "backend")["ok"]


pytestmark = pytest.mark.daemon(agents=("lead", "backend"), ready=_two_routes_done)


@pytest.mark.slow
def test_on_a_daemon_the_quick_answer_is_the_click_commands_byte_for_byte(
        daemon: DaemonProcess) -> None:
    repo = daemon.layout.repo
    for args in (["status"], ["status", "--json"], ["status", "--all", "--agent", "lead"],
                 ["status", "--agent=backend", "--json", "--dir", str(repo / ".squad")]):
        quick, click = _both(args, repo, daemon.env)
        _same(quick, click)
        assert quick.returncode == 0
    report = json.loads(_both(["status", "--json"], repo, daemon.env)[0].stdout)
    assert {s["agent"] for s in report["sessions"]} == {"lead", "backend"}
    table = _both(["status", "--agent", "lead"], repo, daemon.env)[0].stdout.splitlines()
    assert table[0].split() == ["AGENT", "STATE", "SESSION", "AGE", "IDLE", "TOKENS", "COST",
                               "TASK"]
    assert table[1].split()[0] == "lead" and table[1].endswith("Check the build")


@pytest.mark.slow
def test_the_quick_answer_loads_no_click_and_a_closed_pipe_ends_it_quietly(
        daemon: DaemonProcess) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom squadd.cli.quick import answer\n"
         "code = answer(['status', '--json'])\n"
         "print(code, 'click' in sys.modules, 'pydantic' in sys.modules, file=sys.stderr)"],
        cwd=daemon.layout.repo, env=daemon.env, capture_output=True, text=True, timeout=60)
    assert probe.stderr.split() == ["0", "False", "False"]
    assert json.loads(probe.stdout)["pool"]["max_concurrent"] >= 1
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write the child makes fails with EPIPE
    try:
        piped = subprocess.run([sys.executable, "-m", "squadd", "status"], cwd=daemon.layout.repo,
                               env=daemon.env, stdout=write_end, stderr=subprocess.PIPE,
                               text=True, timeout=60)
    finally:
        os.close(write_end)
    assert piped.returncode == 1 and piped.stderr == ""
