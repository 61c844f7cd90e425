"""kill -9 of a real daemon at each step of a session's automatic landing, and before its
worktree commit; a new daemon then finishes or rolls back what was under way and lands again
what it rolled back. Every session ends `landed` or `interrupted` (its work kept, with the
command that continues it), and nothing lands twice."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from squadd.contracts.workspaces import WorkspaceView
from squadd.state.layout import SquadLayout
from squadd.workspaces import records
from squadd.workspaces.records import KILL_ENV
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, clean_env, make_repo
from tests.support.model_servers import OpenAIServer, Reply
from tests.workspaces.conftest import git

pytestmark = pytest.mark.slow

# The check writes a one-test JUnit report (passing when added.txt exists) so that the
# tip check and its kill point run too.
CHECK = ("if test -f added.txt; then r='<testcase classname=\"t\" name=\"ok\"/>'; else "
         "r='<testcase classname=\"t\" name=\"ok\"><failure/></testcase>'; fi; "
         "printf '<testsuite>%s</testsuite>' \"$r\" > {report}")
CONFIG = FAST_CONFIG + f"""
[workspace]
isolation = "worktree"
land = "auto"
spares = 0
land_check = '''{CHECK}'''
land_check_report = "{{report}}"
"""
LANDS = [
    "commit.before", "commit.after", "land.before_rebase", "land.after_squash",
    "land.after_rebase", "land.tip_check", "land.after_check", "land.before_advance",
    "land.after_advance", "land.after_record",
]
POINTS = ["session.before_commit", *LANDS]
SETTLED = {"landed", "needs_attention", "interrupted"}


def _repo(tmp_path: Path) -> SquadLayout:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    git(repo, "config", "user.name", "Repo Owner")
    git(repo, "config", "user.email", "owner@example.com")
    (repo / "app.txt").write_text("one\n")
    layout = make_repo(repo, ("lead",), CONFIG)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "start")
    return layout


def _settled(layout: SquadLayout, session_id: str, timeout_s: float = 120.0) -> WorkspaceView:
    deadline = time.monotonic() + timeout_s
    while True:
        record = records.load(layout, session_id)
        if record is not None and record.state in SETTLED:
            return record
        if time.monotonic() > deadline:
            raise TimeoutError(f"workspace of {session_id} is "
                               f"{record.state if record else 'gone'}, not settled")
        time.sleep(0.05)


@pytest.mark.parametrize("point", POINTS)
def test_a_daemon_killed_mid_landing_ends_every_session_settled_and_lands_once(
        tmp_path: Path, point: str) -> None:
    layout = _repo(tmp_path)
    repo = layout.repo
    start = git(repo, "rev-parse", "main")
    with OpenAIServer() as server:
        server.script(OpenAIServer.tool_call_turn(("write", {"path": "added.txt",
                                                             "content": "added\n"})),
                      OpenAIServer.text_turn("Added added.txt."))
        env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg-config"), **{KILL_ENV: point})
        first = DaemonProcess(layout, server.url, env=env)
        with first:
            accepted = first.client.route("add the file", "lead", wait=False)
            session_id = accepted["session_id"]
            assert first.wait(timeout=120) == -9, first.output[-2000:]

        with DaemonProcess(layout, server.url, env=clean_env(
                XDG_CONFIG_HOME=str(tmp_path / "xdg-config"))) as second:
            record = _settled(layout, session_id)
            listing = second.squadd("workspaces")
        assert server.errors == []

    landed = git(repo, "log", "--format=%H", "--grep", f"Squad-Session: {session_id}", "main")
    assert len(landed.split()) == (1 if record.state == "landed" else 0)  # never twice
    assert git(repo, "rev-list", "--count", f"{start}..main") == \
        ("1" if record.state == "landed" else "0")
    # Killed before its worktree commit (its task had ended) or during the landing: its
    # work is committed and landed, once.
    assert record.state == "landed", (record, listing.stdout)
    assert git(repo, "show", "main:added.txt") == "added"
    assert record.outcome is not None and record.outcome.state == "landed"
    assert record.outcome.commit == git(repo, "rev-parse", "main")
    gitdir = Path(git(repo, "rev-parse", "--absolute-git-dir"))
    assert not list(gitdir.glob("worktrees/*/rebase-merge"))
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", ":!.squad"],
                          capture_output=True, text=True, check=True).stdout == ""


def test_a_session_killed_mid_task_is_interrupted_then_resumed_and_landed(
        tmp_path: Path) -> None:
    layout = _repo(tmp_path)
    repo = layout.repo
    xdg = str(tmp_path / "xdg-config")
    with OpenAIServer() as server:
        server.script(OpenAIServer.tool_call_turn(("write", {"path": "added.txt",
                                                             "content": "added\n"})),
                      Reply(body=None, delay_s=600))  # the next turn never comes back
        with DaemonProcess(layout, server.url, env=clean_env(XDG_CONFIG_HOME=xdg)) as first:
            session_id = first.client.route("add the file", "lead", wait=False)["session_id"]
            added = layout.worktree(session_id) / "added.txt"
            deadline = time.monotonic() + 60
            # Its tool wrote the file and its next turn is waiting on the model: mid-task.
            while not (added.exists() and len(server.requests) >= 2):
                assert time.monotonic() < deadline, first.output[-2000:]
                time.sleep(0.05)
            first.kill()

        server.script(OpenAIServer.text_turn("Added added.txt."))
        with DaemonProcess(layout, server.url, env=clean_env(XDG_CONFIG_HOME=xdg)) as second:
            record = _settled(layout, session_id)
            assert record.state == "interrupted"
            assert added.read_text() == "added\n"  # its work is kept, uncommitted
            assert git(repo, "rev-list", "--count", "main") == "1"
            assert record.outcome is not None
            assert record.outcome.next == f"squadd sessions resume {session_id}"
            listing = second.squadd("workspaces")
            assert f"next: squadd sessions resume {session_id}" in listing.stdout
            resumed = second.client.resume(session_id)
        assert resumed["ok"], resumed

    record = _settled(layout, session_id)
    assert record.state == "landed", record
    assert git(repo, "show", "main:added.txt") == "added"
    landed = git(repo, "log", "--format=%H", "--grep", f"Squad-Session: {session_id}", "main")
    assert len(landed.split()) == 1
