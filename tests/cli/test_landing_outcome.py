"""Every landing outcome reaches whoever asked, through a real daemon on a real git repository
and a scripted OpenAI-compatible model: `squadd route --land` and `squadd land` exit with the
landing's own code and carry it in `--json`, events carry it for a caller that did not wait,
`sessions show` prints it, and `squad_route` over MCP returns it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.daemon_process import DaemonProcess
from tests.support.landing import (
    set_config,
    wait_for_event,
    worktree_daemon,
    writer,
)
from tests.workspaces.conftest import git

pytestmark = [pytest.mark.slow, pytest.mark.daemon(build=worktree_daemon, responder=writer)]


def route(daemon: DaemonProcess, task: str, *extra: str) -> tuple[int, dict[str, Any]]:
    done = daemon.squadd("route", "lead", task, "--land", "--json", *extra, timeout=120)
    return done.returncode, json.loads(done.stdout)


def test_a_landed_route_exits_0_and_its_json_names_the_new_commit(
        daemon: DaemonProcess) -> None:
    code, result = route(daemon, "write a.txt alpha")
    assert code == 0, result
    assert result["ok"] and result["landing"]["state"] == "landed"
    assert result["landing"]["commit"] == git(daemon.layout.repo, "rev-parse", "main")
    assert result["landing"]["next"] is None
    assert (daemon.layout.repo / "a.txt").read_text() == "alpha\n"
    human = daemon.squadd("route", "lead", "write b.txt beta", "--land", timeout=120)
    assert human.returncode == 0 and human.stdout == "wrote b.txt\n"
    assert "landing: landed " in human.stderr


def test_a_failed_check_exits_3_says_so_and_what_to_do_and_main_is_untouched(
        daemon: DaemonProcess) -> None:
    set_config(daemon, 'land_check = "echo the-check-said-no; exit 7"\n')
    assert daemon.squadd("reload").returncode == 0
    before = git(daemon.layout.repo, "rev-parse", "main")
    code, result = route(daemon, "write c.txt gamma")
    assert code == 3, result
    landing = result["landing"]
    assert result["ok"] and landing["state"] == "check_failed"
    assert "the-check-said-no" in landing["detail"]
    # The check fails on main's tip too: the refusal says main itself fails, and how to
    # configure a report.
    assert "main itself fails the land check" in landing["detail"]
    assert "land_check_report" in landing["next"]
    assert landing["next"].endswith(f"`squadd land {result['session_id']}`")
    assert git(daemon.layout.repo, "rev-parse", "main") == before

    human = daemon.squadd("route", "lead", "write d.txt delta", "--land", timeout=120)
    assert human.returncode == 3
    assert "landing: check_failed" in human.stderr and "the-check-said-no" in human.stderr
    assert "main itself fails the land check" in human.stderr
    assert "next: configure a JUnit report" in human.stderr
    shown = daemon.squadd("sessions", "show", result["session_id"])
    assert shown.returncode == 0
    assert "landing: check_failed" in shown.stdout and "next: " in shown.stdout


def test_a_conflict_exits_3_with_the_path_and_the_command_to_continue(
        daemon: DaemonProcess) -> None:
    done = daemon.squadd("route", "lead", "write app.txt mine", "--json", timeout=120)
    session = json.loads(done.stdout)["session_id"]
    (daemon.layout.repo / "app.txt").write_text("theirs\n")
    git(daemon.layout.repo, "commit", "--quiet", "-am", "their edit")
    landed = daemon.squadd("land", session, "--json")
    assert landed.returncode == 3, landed.stderr
    result = json.loads(landed.stdout)
    assert result["landing"]["state"] == "conflict" and result["conflict_paths"] == ["app.txt"]
    worktree = daemon.layout.worktree(session)
    continued = (f"resolve app.txt in the session's worktree (cd {worktree} && git rebase main, "
                 f"fix the files, git add them, git rebase --continue), then `squadd land "
                 f"{session}`")
    assert result["landing"]["next"] == continued
    # The daemon landed it (its bus saw the event; a landing in the CLI's process has none).
    failed = wait_for_event(daemon, "workspace.land_failed", session)
    assert failed["outcome"]["state"] == "conflict" and failed["paths"] == ["app.txt"]
    shown = daemon.squadd("events", "-n", "50", "--type", "workspace.land_failed")
    assert f"{session} " in shown.stdout and "landing: conflict" in shown.stdout
    assert f"next: {continued}" in shown.stdout


def test_a_landing_that_cannot_finish_is_pending_and_exits_4(daemon: DaemonProcess) -> None:
    (daemon.layout.repo / "e.txt").write_text("uncommitted, the user's own\n")
    code, result = route(daemon, "write e.txt epsilon")
    assert code == 4, result
    assert result["landing"]["state"] == "pending"
    assert "e.txt" in result["landing"]["detail"]
    assert result["landing"]["next"] == f"squadd land {result['session_id']}"
    (daemon.layout.repo / "e.txt").unlink()
    again = daemon.squadd("land", result["session_id"])
    assert again.returncode == 0, again.stderr
    assert "landing: landed" in again.stdout


def test_squadd_land_goes_through_the_daemon_and_a_no_wait_caller_learns_from_events(
        daemon: DaemonProcess) -> None:
    started = daemon.squadd("route", "lead", "write f.txt phi", "--no-wait", "--json")
    session = json.loads(started.stdout)["session_id"]
    daemon.wait_for_state(session, {"idle"}, timeout=60)
    landed = daemon.squadd("land", session, "--json")
    assert landed.returncode == 0, landed.stderr
    result = json.loads(landed.stdout)
    assert result["ok"] and result["landing"]["state"] == "landed"
    event = wait_for_event(daemon, "workspace.landed", session)
    assert event["outcome"] == result["landing"]
    assert result["landing"]["commit"] == git(daemon.layout.repo, "rev-parse", "main")


def test_without_a_daemon_land_lands_in_process_with_the_same_json(
        daemon: DaemonProcess) -> None:
    done = daemon.squadd("route", "lead", "write g.txt gamma", "--json", timeout=120)
    session = json.loads(done.stdout)["session_id"]
    assert daemon.stop() == 0
    landed = daemon.squadd("land", session, "--json")
    assert landed.returncode == 0, landed.stderr
    result = json.loads(landed.stdout)
    assert result["landing"]["state"] == "landed"
    assert result["landing"]["commit"] == git(daemon.layout.repo, "rev-parse", "main")


async def test_squad_route_over_mcp_returns_the_landing_and_fails_when_it_was_refused(
        daemon: DaemonProcess) -> None:
    from tests.test_mcp import call, mcp_session, text_of

    async with mcp_session(daemon.layout) as session:
        landed = await call(session, "squad_route", {
            "targetAgent": "lead", "task": "write m.txt mu", "waitForResult": True,
            "land": True})
        set_config(daemon, 'land_check = "echo not-green; exit 1"\n')
        assert daemon.squadd("reload").returncode == 0
        refused = await call(session, "squad_route", {
            "targetAgent": "lead", "task": "write n.txt nu", "waitForResult": True,
            "land": True})
    assert not landed.is_error, text_of(landed)
    assert landed.structured_content is not None
    assert landed.structured_content["landing"]["state"] == "landed"
    assert refused.is_error
    assert refused.structured_content is not None
    landing = refused.structured_content["landing"]
    assert landing["state"] == "check_failed" and "not-green" in landing["detail"]
    text = text_of(refused)
    assert text.startswith("wrote n.txt") and "Landing: check_failed" in text
    assert f"Next: {landing['next']}" in text
