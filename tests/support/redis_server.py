"""A real `redis-server` for tests: its own port and folder, append-only file on, stopped (or
killed) at the end. `restart()` stops it and starts it again on the same port and data, as an
operator's restart would.

    with RedisServer(tmp_path / "redis") as redis:
        url = redis.url
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

import pytest

from tests.support.model_servers import unused_port

START_TIMEOUT_S = 20.0


def redis_server_binary() -> str:
    """The path of `redis-server`; the test is skipped where it is not installed (scripts/test
    installs it)."""
    found = shutil.which("redis-server")
    if found is None:
        pytest.skip("redis-server is not installed (scripts/test installs it with apt-get)")
    return found


class RedisServer:
    def __init__(self, folder: Path, port: int | None = None):
        self.folder = folder
        self.port = port or unused_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", "--protected-mode", "yes"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ping():
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited: " + self.log_text())
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not answer: " + self.log_text())
            time.sleep(0.02)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def log_text(self) -> str:
        path = self.folder / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM (Redis flushes its append-only file) and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def restart_empty(self) -> None:
        """Stop it and start it again with none of its data, as a server without persistence
        (or one whose disk was lost) comes back."""
        self.stop()
        for path in self.folder.iterdir():
            if path.name != "redis.log":
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.start()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
