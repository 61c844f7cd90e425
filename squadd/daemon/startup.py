"""What comes before the daemon serves, and what starting one from the command line needs: the
repo's daemon lock and the files a dead daemon left behind, where it listens (the Unix socket at
mode 0600 from its first moment, TCP on a loopback address unless remote is allowed), and
`squadd serve --detach`, which waits until the new daemon answers. Light to import: the
command line loads it without the daemon's app.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from squadd.daemon._unix import SocketAddress
from squadd.daemon.client import DaemonClient
from squadd.errors import ConfigError, DaemonAlreadyRunningError, DaemonError, DaemonNotRunningError
from squadd.fsio import open_private, try_lock
from squadd.state.layout import SquadLayout

DETACH_WAIT_S = 30.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_tcp(value: str, *, allow_remote: bool) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:PORT`); a non-loopback host needs `allow_remote`."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--tcp {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    if not allow_remote and not is_loopback(host):
        raise DaemonError(
            f"refusing to serve on {host}: it is not a loopback address, so other machines "
            "could reach the API; use 127.0.0.1:PORT, or pass --allow-remote if you mean it "
            "(the bearer token still guards every request)")
    return ("127.0.0.1" if host == "localhost" else host), int(port)


def running_pid(layout: SquadLayout) -> int | None:
    """The PID the running daemon wrote (pid file, else the lock file), if readable."""
    for path in (layout.pid_file, layout.daemon_lock):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def already_running(layout: SquadLayout) -> DaemonAlreadyRunningError:
    pid = running_pid(layout)
    shown = f"PID {pid}" if pid is not None else "PID unknown"
    return DaemonAlreadyRunningError(
        f"a squadd daemon ({shown}) is already running for {layout.repo}: use it, or stop it "
        "with 'squadd stop'", pid=pid)


def take_daemon_lock(layout: SquadLayout) -> int:
    """Hold `run/squadd.lock` (it also records our PID); the fd must stay open."""
    fd = try_lock(layout.daemon_lock)
    if fd is None:
        raise already_running(layout)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def clear_stale(layout: SquadLayout) -> list[str]:
    """Remove the socket, pid and token files of a daemon that died (we hold the lock now)."""
    removed = []
    for path in (layout.socket, layout.pid_file, layout.token_file):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed


def bind_unix(address: SocketAddress) -> socket.socket:
    """A listening socket at `address`, mode 0600 from its first moment (umask around bind)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(address.usable)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    Path(address.usable).chmod(0o600)
    return sock


def bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise DaemonError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


def start_detached(layout: SquadLayout, serve_args: list[str]) -> int:
    """Run `squadd serve SERVE_ARGS` in a new session, its console output in the log folder;
    return its PID once its socket answers (a `DaemonError` with the output if it died)."""
    fd = try_lock(layout.daemon_lock)
    if fd is None:
        raise already_running(layout)
    os.close(fd)
    out_path = console_log(layout)
    with open_private(out_path) as out:
        start = out.tell()
        proc = subprocess.Popen(
            [sys.executable, "-m", "squadd", "serve", *serve_args], stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=layout.repo,
            close_fds=True)
    deadline = time.monotonic() + DETACH_WAIT_S
    with DaemonClient(layout, timeout=2.0) as client:
        while True:
            code = proc.poll()
            if code is not None:
                with out_path.open("rb") as handle:
                    handle.seek(start)
                    said = handle.read()[-2000:].decode("utf-8", "replace").strip()
                raise DaemonError(f"the daemon exited (status {code}) before it answered"
                                  + (f":\n{said}" if said else f"; see {out_path}"))
            with contextlib.suppress(DaemonNotRunningError):
                if client.health().get("pid") == proc.pid:
                    return proc.pid
            if time.monotonic() > deadline:
                raise DaemonError(f"the daemon (PID {proc.pid}) did not answer within "
                                  f"{DETACH_WAIT_S:g}s; see {out_path}")
            time.sleep(0.05)


def console_log(layout: SquadLayout) -> Path:
    """Where a detached daemon's console output goes, beside its JSON log."""
    return layout.log_file.with_suffix(".out")
