"""`squadd demo` as a person runs it: a subprocess that sets up a squad, plays the bundled
recording through a real daemon, merges the decisions, and leaves no daemon behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from squadd.cli.demo import demo_file
from squadd.providers.replay import parse_script
from tests.support.daemon_process import clean_env, make_repo

pytestmark = pytest.mark.slow

DEMO_TIMEOUT_S = 120


def recorded_decisions() -> list[str]:
    """The titles of every squad_decide call in the recording."""
    script = parse_script(demo_file("recording.yaml").read_text(encoding="utf-8"),
                          source="recording.yaml")
    return [str(call.arguments["title"])
            for turns in script.agents.values() for turn in turns
            for call in turn.tool_calls
            if call.name == "squad_decide" and isinstance(call.arguments, dict)]


def run_demo(cwd: Path, tmpdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "squadd", "demo", "--pace", "0", *args], cwd=cwd,
        env=clean_env(TMPDIR=str(tmpdir), XDG_CONFIG_HOME=str(tmpdir / "xdg-config")),
        capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, stdin=subprocess.DEVNULL)


def daemons_serving(path: Path) -> list[int]:
    """PIDs of live `squadd serve` processes whose command line names `path`."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if ("serve" in cmdline and str(path) in cmdline
                and process.info["status"] != psutil.STATUS_ZOMBIE):
            found.append(process.info["pid"])
    return found


def test_demo_plays_the_recording_and_cleans_up(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = run_demo(tmp_path, scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    intro, _, rest = out.partition("== Setting up the squad")
    assert "RECORDING: no model is called" in intro
    assert "That was a recording: no model was called." in rest
    titles = recorded_decisions()
    assert len(titles) == 3
    decisions_md = rest.split("== .squad/decisions.md", 1)[1]
    for title in titles:
        assert f": {title}\n" in decisions_md
    assert "merged 3 decision(s) from the inbox" in out
    assert "+ run/transcripts/" in out and "~ agents/backend/history.md" in out
    assert not list(scratch.glob("squadd-demo-*")), "the temporary repository was not removed"
    started = re.search(r"\(PID (\d+), socket", out)
    assert started, out
    pid = int(started.group(1))
    assert f"Stopped the daemon (PID {pid})." in out
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert daemons_serving(scratch) == []


def test_demo_here_writes_into_this_repo_and_keeps_its_agents(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo", ("lead",))
    mine = "# lead — Lead\n\nMy own charter, which the demo must not touch.\n"
    layout.charter("lead").write_text(mine, encoding="utf-8")
    done = run_demo(layout.repo, tmp_path, "--here")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agent lead exists already" in done.stdout
    assert layout.charter("lead").read_text(encoding="utf-8") == mine
    assert layout.charter("backend").is_file() and layout.charter("tester").is_file()
    decisions = layout.decisions_md.read_text(encoding="utf-8")
    for title in recorded_decisions():
        assert f": {title}\n" in decisions
    assert not any(layout.inbox_dir.glob("*.md"))
    assert "X-Forwarded-For" in layout.history("backend").read_text(encoding="utf-8")
    assert not layout.socket.exists() and not layout.pid_file.exists()
    assert daemons_serving(layout.repo) == []
