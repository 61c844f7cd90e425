"""`squadd stop`: the daemon's exit is watched from before it is asked to stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from squadd.cli import control
from squadd.errors import DaemonNotRunningError
from squadd.procs import exit_fd


class _Layout:
    def __init__(self, root: Path):
        self.root = root

    def transcript_journals_of(self, pid: int) -> list[Path]:
        return sorted(self.root.glob(f"{pid}-*.log"))


class _Daemon:
    """A client whose daemon is a real child process: `shutdown` ends it."""

    def __init__(self, proc: subprocess.Popen[bytes], root: Path, calls: list[str]):
        self.proc = proc
        self.layout = _Layout(root)
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
        self.proc.terminate()
        self.proc.wait(10)  # reaped: its PID is free for another process from here on
        return {"stopping": True, "pid": self.proc.pid}


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Daemon]:
    try:
        own = exit_fd(os.getpid())
    except OSError:
        pytest.skip("this system has no pidfd")
    if own is not None:
        os.close(own)
    calls: list[str] = []
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fake = _Daemon(proc, tmp_path, calls)
    monkeypatch.setattr(control, "client_for", lambda directory: fake)
    watch = control._exit_watch

    def recorded(pid: int) -> control._ExitWatch | None:
        calls.append(f"watch {pid}")
        return watch(pid)

    monkeypatch.setattr(control, "_exit_watch", recorded)
    yield fake
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_stop_watches_the_daemon_before_asking_it_to_stop(daemon: _Daemon) -> None:
    stopped = CliRunner().invoke(control.stop, ["--timeout", "30"])
    assert stopped.exit_code == 0, stopped.output
    assert f"squadd (PID {daemon.proc.pid}) stopped" in stopped.output
    assert daemon.calls[:3] == ["health", f"watch {daemon.proc.pid}", "shutdown"]


def test_stop_says_when_the_daemon_left_its_journal(daemon: _Daemon, tmp_path: Path) -> None:
    (tmp_path / f"{daemon.proc.pid}-0badc0de.log").write_bytes(b"")
    stopped = CliRunner().invoke(control.stop, ["--timeout", "30"])
    assert stopped.exit_code == control.UNFINISHED_EXIT
    assert "its stop did not finish" in stopped.output


def test_stop_without_waiting_only_asks(daemon: _Daemon) -> None:
    stopped = CliRunner().invoke(control.stop, ["--no-wait"])
    assert stopped.exit_code == 0, stopped.output
    assert daemon.calls == ["shutdown"]
    assert f"squadd (PID {daemon.proc.pid}) is stopping" in stopped.output
