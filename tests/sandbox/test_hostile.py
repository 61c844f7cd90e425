"""The hostile half: each attack runs as a model-issued `bash` call, as a YAML tool and inside the
land check, under each sandbox mechanism this machine has, and the test fails if any succeeds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from squadd.workspaces.manager import Workspaces
from tests.sandbox.conftest import World, running, sandbox_settings
from tests.workspaces.conftest import Events


@dataclass(frozen=True)
class Attack:
    command: str
    held: Callable[[World, str], list[str]]
    """What went wrong, given the world after the attack and the attack's output."""


def _secret_kept(key: str) -> Callable[[World, str], list[str]]:
    def held(world: World, output: str) -> list[str]:
        return [f"read the {key} secret"] if world.secrets[key] in output else []
    return held


def _nothing_written(world: World, output: str) -> list[str]:
    wrong = [f"wrote {path}" for path in world.outside.rglob("*")]
    if (world.home / ".bashrc").read_text() != "# the user's own\n":
        wrong.append("changed ~/.bashrc")
    return wrong


def _no_hooks(world: World, output: str) -> list[str]:
    planted = [p for p in (world.common_dir / "hooks").iterdir() if not p.name.endswith(
        ".sample")]
    planted += list(world.hooks_path.iterdir())
    return [f"planted {path}" for path in planted]


def _config_kept(world: World, output: str) -> list[str]:
    text = (world.common_dir / "config").read_text()
    wrong = ["changed .git/config"] if "fsmonitor" in text or "pwned" in text else []
    if (world.worktree / ".git").read_text().strip().startswith("gitdir: /tmp/pwned"):
        wrong.append("pointed the worktree's .git elsewhere")
    return wrong


def _no_connection(world: World, output: str) -> list[str]:
    wrong = ["connected to 127.0.0.1"] if "CONNECTED" in output else []
    return wrong + (["the listener got a connection"] if world.connections() else [])


def _no_signal(world: World, output: str) -> list[str]:
    wrong = ["could signal the daemon"] if "SIGNALLED" in output else []
    if world.victim.poll() is not None:
        wrong.append("killed another session's process")
    else:
        state = Path(f"/proc/{world.victim.pid}/stat").read_text().rpartition(")")[2].split()[0]
        if state == "T":
            wrong.append("stopped another session's process")
    return wrong


def _nothing_left(world: World, output: str) -> list[str]:
    deadline = time.monotonic() + 10  # a SIGKILL lands once the kernel runs the process
    while running(world.token) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [f"left {pid} running" for pid in running(world.token)]


ATTACKS = {
    "read ~/.ssh/id_rsa": Attack(
        "cat {ssh}; cat {home}/.ssh/../.ssh/id_rsa; find {home} -name id_rsa -exec cat {{}} ';'; "
        "cp {ssh} copy.txt; cat copy.txt", _secret_kept("ssh")),
    "read the secrets file": Attack(
        "cat {secrets}; grep -r API_KEY {home}/.config", _secret_kept("squadd")),
    "read .squad/run": Attack("cat {run_token}; cat .squad/../../../run/planted-token",
                              _secret_kept("run")),
    "write outside the worktree": Attack(
        "echo pwned > {outside}/pwned; mkdir {outside}/dir; echo pwned >> {home}/.bashrc; "
        "ln -s {outside} link && echo pwned > link/via-link", _nothing_written),
    "write into .git/hooks and core.hooksPath": Attack(
        "echo 'touch /tmp/pwned' > {common}/hooks/pre-commit; "
        "echo x > $(git rev-parse --git-common-dir)/hooks/post-checkout; "
        "echo x > {hooks_path}/pre-commit", _no_hooks),
    "write .git/config": Attack(
        "git config core.fsmonitor 'touch /tmp/pwned'; echo '[core] pwned = 1' >> {common}/config; "
        "echo 'gitdir: /tmp/pwned' > .git", _config_kept),
    "connect to 127.0.0.1": Attack(
        "{python} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); "
        "print('CONNECTED')\"; (echo hi > /dev/tcp/127.0.0.1/{port}) && echo CONNECTED",
        _no_connection),
    "signal the daemon or another session": Attack(
        "kill -0 {daemon} && echo SIGNALLED; kill -9 {victim}; kill -STOP {victim}",
        _no_signal),
    "leave a process running": Attack(
        "setsid -f bash -c 'exec -a {token}-setsid sleep 300'; "
        "nohup bash -c 'exec -a {token}-nohup sleep 300' >/dev/null 2>&1 & "
        "(setsid bash -c '(exec -a {token}-double sleep 300) &' &); "
        "setsid -f env -i /bin/bash -c 'exec -a {token}-env sleep 300'; "
        "sleep 0.5; echo launched", _nothing_left),
}

def _judge(world: World, name: str, output: str) -> list[str]:
    return ATTACKS[name].held(world, output)


UNCONFINED_STILL_HELD = {"leave a process running"}
"""Even unconfined, the call's cgroup (or the launcher's reaper) ends what it left running."""


@pytest.mark.parametrize("name", sorted(set(ATTACKS) - UNCONFINED_STILL_HELD))
async def test_each_attack_succeeds_unconfined_so_the_suite_can_tell(world: World,
                                                                     name: str) -> None:
    if world.mechanism != "bwrap":
        pytest.skip("one control run is enough")
    off = sandbox_settings(world.layout, "off")
    result = await world.bash(ATTACKS[name].command.format(**world.values()), settings=off)
    assert result.details["sandbox"]["mechanism"] == "off"
    assert _judge(world, name, result.text), result.text


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_an_attack_as_a_bash_call_fails(world: World, name: str) -> None:
    result = await world.bash(ATTACKS[name].command.format(**world.values()))
    assert result.details["sandbox"]["mechanism"] == world.mechanism
    assert not _judge(world, name, result.text), result.text


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_an_attack_as_a_yaml_tool_fails(world: World, name: str) -> None:
    result = await world.yaml_tool(ATTACKS[name].command.format(**world.values()))
    assert result.details["sandbox"]["mechanism"] == world.mechanism
    assert not _judge(world, name, result.text), result.text


async def test_the_land_check_runs_the_attacks_from_the_worktree(world: World) -> None:
    script = "\n".join(f"echo '== {name}'; ( {attack.command.format(**world.values())} ) 2>&1"
                       for name, attack in ATTACKS.items())
    layout = world.layout
    (world.worktree / "attacks.sh").write_text(script + "\necho checked\n")
    settings = sandbox_settings(layout, world.mechanism).model_copy(update={
        "workspace": world.settings.workspace.model_copy(update={
            "land_check": "bash attacks.sh; exit 1"})})
    spaces = Workspaces(layout, settings, Events())
    result = await spaces.land(world.session_id)
    assert not result.ok and result.reason == "check_failed", result.message
    output = layout.workspace_output(world.session_id, "land-check").read_text()
    assert "checked" in output and "== leave a process running" in output
    for name in ATTACKS:
        assert not _judge(world, name, output), (name, output)


async def test_a_fork_bomb_is_bounded_by_max_processes(world: World) -> None:
    command = (f"for i in $(seq 200); do (exec -a {world.token}-bomb sleep 30) & done 2>&1 "
               "| grep -m1 -o 'Resource temporarily unavailable'; echo forked")
    result = await world.bash(command, seconds=20)
    assert "Resource temporarily unavailable" in result.text, result.text
    assert result.details["sandbox"]["max_processes"] == 64
    assert not _nothing_left(world, result.text)


@pytest.mark.slow
async def test_a_real_fork_bomb_ends_with_its_call(world: World) -> None:
    # Every fork of the bomb keeps the command line, token and all: the host can find them.
    # The call's own shell waits (builtins only, forked before the bomb starts) for the first
    # line the bomb writes to stderr: the bomb's first generations exit at once, so a shell
    # that only `wait`ed could end, and its group be killed, before any fork met the bound.
    result = await world.bash(
        f"{{ :(){{ :|:& }};:; }} 2>&1 | {{ read -r line; echo \"first: $line\"; }} "
        f"# {world.token}", seconds=10)
    # It hits the bound before the timeout, and the rest of the bomb goes with the call.
    assert "first:" in result.text and "Resource temporarily unavailable" in result.text, (
        result.text)
    assert not result.details["timed_out"], (result.text, result.details)
    assert not _nothing_left(world, result.text)
    assert (await world.bash("echo alive")).text.startswith("alive")
