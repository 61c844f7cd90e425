"""`squadd stop`: the daemon's exit is watched from before it is asked to stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from squadd.cli import control
from squadd.errors import DaemonNotRunningError
from squadd.procs import exit_fd
from squadd.state.layout import SquadLayout


class _Daemon:
    """A client whose daemon is a real child process: `shutdown` ends it. The one that answers
    the shutdown may be another (`successor`), as when a daemon took the first one's place."""

    def __init__(self, proc: subprocess.Popen[bytes], layout: SquadLayout, calls: list[str]):
        self.proc = proc
        self.successor: subprocess.Popen[bytes] | None = None
        self.layout = layout
        self.calls = calls
        self.stopping = False

    def __enter__(self) -> _Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def health(self) -> dict[str, Any]:
        self.calls.append("health")
        if self.stopping:
            raise DaemonNotRunningError("gone")
        return {"ok": True, "pid": self.proc.pid}

    def shutdown(self) -> dict[str, Any]:
        self.calls.append("shutdown")
        self.stopping = True
        answering = self.successor or self.proc
        answering.terminate()
        answering.wait(10)  # reaped: its PID is free for another process from here on
        return {"stopping": True, "pid": answering.pid}


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.fixture
def daemon(squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Daemon]:
    try:
        own = exit_fd(os.getpid())
    except OSError:
        pytest.skip("this system has no pidfd")
    if own is not None:
        os.close(own)
    calls: list[str] = []
    fake = _Daemon(_sleeper(), squad, calls)
    monkeypatch.setattr(control, "client_for", lambda directory: fake)
    watch = control._exit_watch

    def recorded(pid: int) -> control._ExitWatch | None:
        calls.append(f"watch {pid}")
        return watch(pid)

    monkeypatch.setattr(control, "_exit_watch", recorded)
    yield fake
    for proc in (fake.proc, fake.successor):
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_stop_watches_the_daemon_before_asking_it_to_stop(daemon: _Daemon) -> None:
    stopped = CliRunner().invoke(control.stop, ["--timeout", "30"])
    assert stopped.exit_code == 0, stopped.output
    assert f"squadd (PID {daemon.proc.pid}) stopped" in stopped.output
    assert daemon.calls[:3] == ["health", f"watch {daemon.proc.pid}", "shutdown"]


def test_stop_watches_the_daemon_that_answered_when_another_took_its_place(
        daemon: _Daemon) -> None:
    daemon.successor = _sleeper()
    stopped = CliRunner().invoke(control.stop, ["--timeout", "30"])
    # Not a wait for the first one, which nobody asked to stop, until the timeout.
    assert stopped.exit_code == 0, stopped.output
    assert f"squadd (PID {daemon.successor.pid}) stopped" in stopped.output
    assert daemon.calls[:4] == ["health", f"watch {daemon.proc.pid}", "shutdown",
                                f"watch {daemon.successor.pid}"]
    assert daemon.proc.poll() is None


def test_stop_says_when_the_daemon_left_its_journal(daemon: _Daemon) -> None:
    journal = daemon.layout.transcript_journal(daemon.proc.pid, "0badc0de")
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b"")
    stopped = CliRunner().invoke(control.stop, ["--timeout", "30"])
    assert stopped.exit_code == control.UNFINISHED_EXIT
    assert "its stop did not finish" in stopped.output and journal.name in stopped.output


def test_stop_without_waiting_only_asks(daemon: _Daemon) -> None:
    stopped = CliRunner().invoke(control.stop, ["--no-wait"])
    assert stopped.exit_code == 0, stopped.output
    assert daemon.calls == ["shutdown"]
    assert f"squadd (PID {daemon.proc.pid}) is stopping" in stopped.output
