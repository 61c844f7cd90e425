"""Choosing the mechanism, refusing when there is none, `mode = "off"` as a logged choice, and
nothing outliving a call whatever the mode: with or without a cgroup, `setsid -f env -i`
included (a process that clears its environment carries no mark for the old sweep to find)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import structlog.testing

from squadd.errors import SandboxError
from squadd.sandbox import bwrap, cgroup, core, landlock
from squadd.tools.discovery import ToolDiscoverer
from tests.sandbox.conftest import World, running, sandbox_settings

ESCAPES = ("setsid -f env -i /bin/bash -c 'exec -a {token}-a sleep 300'; "
           "(setsid env -i /bin/sh -c '(exec -a {token}-b sleep 300 &)' &); "
           "nohup env -i /bin/bash -c 'exec -a {token}-c sleep 300' >/dev/null 2>&1 & "
           "sleep 0.5; echo launched")


def _without_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "parent", lambda: None)


def _gone(world: World) -> list[int]:
    import time
    deadline = time.monotonic() + 10
    while running(world.token) and time.monotonic() < deadline:
        time.sleep(0.02)
    return running(world.token)


@pytest.mark.parametrize("with_cgroup", [True, False], ids=["cgroup", "reaper"])
async def test_setsid_env_i_leaves_nothing_behind_even_unconfined(
        world: World, with_cgroup: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if world.mechanism != "bwrap":
        pytest.skip("mode off runs the same whatever the machine has")
    if with_cgroup and cgroup.parent() is None:
        pytest.skip("no pids cgroup squadd may make here")
    if not with_cgroup:
        _without_cgroup(monkeypatch)
    off = sandbox_settings(world.layout, "off")
    result = await world.bash(ESCAPES.format(token=world.token), settings=off)
    assert "launched" in result.text, result.text
    assert result.details["sandbox"]["mechanism"] == "off"
    assert not _gone(world)


async def test_without_a_cgroup_the_sandbox_still_ends_every_process(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    _without_cgroup(monkeypatch)
    result = await world.bash(ESCAPES.format(token=world.token))
    assert "launched" in result.text, result.text
    assert result.details["sandbox"]["process_limit"] == (
        "none" if os.geteuid() == 0 else "rlimit")
    assert not _gone(world)


async def test_a_timed_out_call_leaves_nothing_behind(world: World,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _without_cgroup(monkeypatch)  # the reaper (Landlock) or the PID namespace (bwrap) alone
    result = await world.bash(ESCAPES.format(token=world.token).replace(
        "echo launched", "echo launched; sleep 60"), seconds=3)
    assert result.details["timed_out"] is True and "launched" in result.text
    assert not _gone(world)


async def test_with_no_mechanism_bash_and_shell_tools_are_refused_naming_mode_off(
        world: World, monkeypatch: pytest.MonkeyPatch, fresh_choice: None) -> None:
    monkeypatch.setattr(bwrap, "probe", lambda: "bwrap is not installed")
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    auto = sandbox_settings(world.layout, "auto")
    result = await world.bash("echo ran", settings=auto)
    assert not result.ok and "ran" not in result.text.split("\n")
    assert 'sandbox.mode = "off"' in result.text and "bwrap is not installed" in result.text
    assert "Landlock is not enabled" in result.text
    world.settings = auto
    tool = await world.yaml_tool("echo ran")
    assert not tool.ok and 'sandbox.mode = "off"' in tool.text
    with pytest.raises(SandboxError):
        core.mechanism_for("bwrap")


async def test_mode_off_is_logged_at_each_call(world: World) -> None:
    off = sandbox_settings(world.layout, "off")
    with structlog.testing.capture_logs() as logs:
        result = await world.bash("echo unconfined", settings=off)
    assert result.ok and result.details["sandbox"]["mechanism"] == "off"
    assert [e for e in logs if e["event"] == "sandbox.off"]


async def test_auto_picks_bwrap_before_landlock(fresh_choice: None) -> None:
    if bwrap.probe() is not None:
        pytest.skip("bwrap is not available here")
    assert core.mechanism_for("auto") == "bwrap"


def test_spare_python_workers_serve_only_their_own_policy(world: World) -> None:
    discoverer = ToolDiscoverer()
    spares = discoverer.workers
    try:
        spares.policy = None
        spares.refill()
        [started] = spares.waiting()
        from squadd.sandbox import build_policy

        policy = build_policy(mode=world.mechanism, network=False,  # type: ignore[arg-type]
                              workspace=world.worktree, repo=world.layout.repo,
                              squad_dir=world.layout.root)
        assert spares.take(policy) is None  # an unconfined spare is not handed to it
        assert started not in spares.waiting()
    finally:
        spares.close()


def test_the_cgroups_of_a_killed_squadd_are_emptied_at_the_next_start(
        tmp_path: Path) -> None:
    if cgroup.parent() is None:
        pytest.skip("no pids cgroup squadd may make here")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a squadd pid that no longer runs
    base = cgroup.parent()
    assert base is not None
    stale = base / f"squadd-{gone.pid}-1"
    stale.mkdir()
    # A process that cleared its environment, left in the dead squadd's cgroup.
    left = subprocess.Popen(["sh", "-c",
                             f'echo $$ > "{stale}/cgroup.procs"; exec env -i sleep 300'])
    try:
        for _ in range(500):
            if cgroup.members(stale):
                break
            time.sleep(0.01)
        assert cgroup.members(stale) == [left.pid]
        killed = cgroup.remove_stale()
        assert any(entry.startswith(f"{left.pid} ") for entry in killed), killed
        assert left.wait(10) == -9 and not stale.exists()
    finally:
        left.kill()
        left.wait(10)
        if stale.exists():
            cgroup.destroy(stale)
