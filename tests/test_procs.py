"""Commands a killed squadd left running: found by the owner mark in their environment and
stopped by the next squadd (`procs.stop_orphans`); a live squadd's commands are left alone.
What a finished command left in its group has exited, not just been signalled, by the time
`run_group` returns."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import psutil
import pytest

from squadd.procs import (
    OWNER_VAR,
    Command,
    exit_fd,
    group_members,
    owner_mark,
    process_start,
    run_group,
    stop_orphans,
)

# A stand-in squadd: runs a command through the one runner (whose leader starts a grandchild),
# prints the pids, and waits to be killed.
OWNER = textwrap.dedent("""
    import anyio, sys
    from squadd.procs import Command, run_group

    class Out:
        async def write(self, data: bytes) -> None:
            sys.stdout.write(data.decode()); sys.stdout.flush()

    async def main() -> None:
        script = "sleep 300 & echo $$ $!; wait"
        await run_group(Command(["sh", "-c", script], None, None), Out(),
                        deadline=anyio.current_time() + 600)

    anyio.run(main)
""")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _start_owner() -> tuple[subprocess.Popen[str], list[int]]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    pids = [int(p) for p in owner.stdout.readline().split()]
    assert len(pids) == 2, pids
    # `$!` is printed as soon as `sleep` is forked: until it has exec'd, /proc shows an
    # environment in the making (read empty mid-exec), so wait for the command it became.
    deadline = time.monotonic() + 60
    while psutil.Process(pids[1]).cmdline()[:1] != ["sleep"]:
        assert time.monotonic() < deadline, "the grandchild never became `sleep`"
        time.sleep(0.01)
    return owner, pids


def test_a_killed_owners_commands_are_stopped_and_a_live_owners_are_not() -> None:
    owner, (leader, grandchild) = _start_owner()
    try:
        environ = Path(f"/proc/{grandchild}/environ").read_bytes().split(b"\0")
        assert f"{OWNER_VAR}={owner.pid}:{process_start(owner.pid)}".encode() in environ
        assert leader not in stop_orphans() and not _gone(grandchild)  # its squadd runs
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        assert not _gone(leader) and not _gone(grandchild)  # nobody stopped them
        assert {leader, grandchild} <= set(stop_orphans())
        psutil.wait_procs([psutil.Process(p) for p in (leader, grandchild) if not _gone(p)],
                          timeout=30)
        assert _gone(leader) and _gone(grandchild)
    finally:
        owner.kill()
        owner.wait(timeout=30)
        for pid in (leader, grandchild):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_mark_names_this_process() -> None:
    assert owner_mark() == f"{os.getpid()}:{process_start(os.getpid())}"


def test_an_exit_fd_is_readable_once_its_process_has_exited_and_none_once_it_is_gone() -> None:
    import select

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        fd = exit_fd(child.pid)
        assert fd is not None
        try:
            assert select.select([fd], [], [], 0)[0] == []  # still running
            child.kill()
            assert select.select([fd], [], [], 30)[0] == [fd]  # exited (a zombie counts)
        finally:
            os.close(fd)
    finally:
        child.kill()
        child.wait(10)
    assert exit_fd(child.pid) is None  # reaped: nothing left to watch


class _Collected:
    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data


async def test_what_a_finished_command_left_in_its_group_has_exited_when_run_group_returns(
        tmp_path: Path) -> None:
    # Checked at once, without waiting: a sweep that runs next (processes that left the group,
    # a cgroup's removal) must not find one of these still dying and call it an escapee. Each
    # holds 256 MB, which takes the kernel a while to free once it is killed; none holds the
    # output pipe, so nothing else makes the runner wait for them.
    ready = tmp_path / "ready"
    hog = (f"import sys, time; x = b'x' * (256 << 20); "
           f"open({str(ready)!r} + sys.argv[1], 'w').close(); time.sleep(300)")
    script = (f"for i in 1 2 3; do {shlex.quote(sys.executable)} -c {shlex.quote(hog)} $i "
              f">/dev/null 2>&1 & done; "
              f"while [ $(ls {shlex.quote(str(tmp_path))} | wc -l) -lt 3 ]; do sleep 0.01; done; "
              "echo $$ $(jobs -p)")
    out = _Collected()
    outcome = await run_group(Command(["bash", "-c", script], None, None), out,
                              deadline=anyio.current_time() + 120)
    assert outcome.exit_code == 0
    leader, *background = (int(pid) for pid in out.data.split())
    assert len(background) == 3
    assert group_members(leader) == []
    assert [pid for pid in background if not _gone(pid)] == []


async def test_megabytes_go_through_the_pipes_whole_both_ways_and_a_closed_stdin_is_no_hang(
        ) -> None:
    """The runner's pipes are non-blocking descriptors on the loop: input larger than a pipe
    holds is fed as the command reads it, output larger than one read comes back whole, and a
    command that stops reading its input early ends the feed instead of blocking it."""
    data = os.urandom(3 << 20)
    out, err = _Collected(), _Collected()
    outcome = await run_group(Command(["cat"], None, None, stdin=data), out, err,
                              deadline=anyio.current_time() + 120)
    assert outcome.exit_code == 0 and outcome.ending == "exited"
    assert out.data == data and err.data == b""

    head = _Collected()
    outcome = await run_group(Command(["head", "-c", "10"], None, None, stdin=data), head,
                              deadline=anyio.current_time() + 120)
    assert outcome.ending == "exited" and head.data == data[:10]


async def test_a_command_that_cannot_start_is_an_os_error_and_leaves_no_pipe_open(
        tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    before = open_fds()
    for command in (Command(["no-such-program-here"], None, None, stdin=b"input"),
                    Command(["true"], tmp_path / "missing", None)):
        with pytest.raises(OSError):
            await run_group(command, _Collected(), _Collected(),
                            deadline=anyio.current_time() + 30)
    assert open_fds() == before
