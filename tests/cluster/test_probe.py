"""The first contact with Redis: each way it can fail is one sentence naming the cause, with
no retries and no traceback, from the probe itself and from `squadd serve` / `squadd worker`."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from squadd.cluster.connection import ClusterError
from squadd.cluster.probe import probe, shown
from tests.support.daemon_process import clean_env, make_repo
from tests.support.model_servers import unused_port
from tests.support.redis_server import RedisServer, redis_server_binary


@pytest.fixture(scope="module")
def guarded_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server that asks for a password ("sekret"); its URL."""
    folder = Path(tmp_path_factory.mktemp("guarded"))
    port = unused_port()
    proc = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder), "--requirepass", "sekret"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a host that does not
    answer as Redis would)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def test_nothing_listening_is_named_as_such() -> None:
    with pytest.raises(ClusterError, match=r"nothing listens at redis://127\.0\.0\.1:.*refused"):
        probe(f"redis://127.0.0.1:{refused_port()}/0", None)


def test_a_host_that_never_answers_is_reported_within_the_probe_bound(
        silent_listener: int) -> None:
    with pytest.raises(ClusterError, match=r"did not answer within 0\.5s"):
        probe(f"redis://127.0.0.1:{silent_listener}/0", None, timeout_s=0.5)


def test_tls_to_a_plain_server_says_to_use_redis_scheme(silent_listener: int) -> None:
    with pytest.raises(ClusterError, match=r"TLS handshake.*Use redis://"):
        probe(f"rediss://127.0.0.1:{silent_listener}/0", None, timeout_s=0.5)


def test_missing_and_wrong_passwords_are_told_apart(guarded_redis: str) -> None:
    with pytest.raises(ClusterError, match=r"needs a password and none is set.*"
                                            r"SQUADD_REDIS_PASSWORD"):
        probe(guarded_redis, None)
    with pytest.raises(ClusterError, match="refused the password") as caught:
        probe(guarded_redis, "wrong")
    assert "wrong" not in str(caught.value)  # the password itself is never shown
    probe(guarded_redis, "sekret")


def test_a_database_index_out_of_range_is_named(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        with pytest.raises(ClusterError, match="database index in the URL is out of range"):
            probe(server.url.replace("/0", "/999"), None)
        probe(server.url, None)


def test_shown_urls_carry_no_credentials() -> None:
    assert shown("redis://user:pw@example.test:6380/2") == "redis://example.test:6380/2"


@pytest.mark.slow
def test_serve_and_worker_fail_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo", ("lead",))
    url = f"redis://127.0.0.1:{refused_port()}/0"
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_CACHE_HOME=str(tmp_path / "c"))
    subprocess.run(["git", "init", "-q"], cwd=layout.repo, check=True)
    for argv in (["serve", "--cluster", url],
                 ["worker", "--cluster", url, "--repo", str(layout.repo), "--name", "w1",
                  "--workdir", str(tmp_path / "clone")]):
        done = subprocess.run([sys.executable, "-m", "squadd", *argv], cwd=layout.repo,
                              env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 1, (argv, done.stdout, done.stderr)
        assert "nothing listens at" in done.stderr
        assert "Traceback" not in done.stderr + done.stdout
