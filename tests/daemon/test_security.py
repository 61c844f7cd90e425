"""Who may talk to the daemon: the socket is 0600, TCP needs the bearer token, and only
loopback addresses are served unless --allow-remote is given."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
import pytest

from squadd.daemon.client import DaemonClient, DaemonRequestError
from squadd.daemon.startup import parse_tcp
from squadd.errors import ConfigError, DaemonError
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, make_repo
from tests.support.model_servers import OpenAIServer, unused_port

pytestmark = pytest.mark.slow


def test_the_socket_and_the_lock_are_for_the_owner_only(daemon: DaemonProcess) -> None:
    layout = daemon.layout
    assert stat.S_ISSOCK(layout.socket.stat().st_mode)
    assert stat.S_IMODE(layout.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(layout.daemon_lock.stat().st_mode) == 0o600
    assert not layout.token_file.exists()  # no TCP, no token


def test_tcp_needs_the_token_from_the_0600_token_file(tmp_path: Path,
                                                      model_server: OpenAIServer) -> None:
    port = unused_port()
    layout = make_repo(tmp_path / "repo", config=FAST_CONFIG)
    with DaemonProcess(layout, model_server.url, extra_args=("--tcp", f"127.0.0.1:{port}")):
        assert stat.S_IMODE(layout.token_file.stat().st_mode) == 0o600
        token = layout.token_file.read_text(encoding="utf-8").strip()
        assert len(token) >= 32
        base = f"http://127.0.0.1:{port}"
        without = httpx.get(f"{base}/v1/health", timeout=10)
        assert without.status_code == 401 and "token" in without.json()["error"]
        assert without.headers["www-authenticate"] == "Bearer"
        wrong = httpx.get(f"{base}/v1/health", timeout=10,
                          headers={"authorization": f"Bearer {token[:-1]}x"})
        assert wrong.status_code == 401
        not_bearer = httpx.get(f"{base}/v1/health", timeout=10, headers={"authorization": token})
        assert not_bearer.status_code == 401
        post = httpx.post(f"{base}/v1/route", json={"targetAgent": "lead", "task": "x"},
                          timeout=10)
        assert post.status_code == 401 and model_server.requests == []
        with DaemonClient(layout, tcp=f"127.0.0.1:{port}", token=token) as client:
            assert client.health()["ok"] is True
        with DaemonClient(layout, tcp=f"127.0.0.1:{port}", token="guess") as client, \
                pytest.raises(DaemonRequestError) as caught:
            client.status()
        assert caught.value.status == 401


def test_a_non_loopback_bind_is_refused_without_allow_remote(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    daemon = DaemonProcess(layout, "http://127.0.0.1:9/v1",
                           extra_args=("--tcp", f"0.0.0.0:{unused_port()}"))
    refused = daemon.squadd(*daemon.command[3:])
    assert refused.returncode == 1
    assert "--allow-remote" in refused.stderr and "0.0.0.0" in refused.stderr
    assert not layout.socket.exists() and not layout.pid_file.exists()


@pytest.mark.parametrize("address", ["0.0.0.0:80", "10.1.2.3:8080", "example.com:80",
                                     "[2001:db8::1]:80"])
def test_parse_tcp_refuses_remote_hosts_unless_allowed(address: str) -> None:
    with pytest.raises(DaemonError, match="--allow-remote"):
        parse_tcp(address, allow_remote=False)
    host, port = parse_tcp(address, allow_remote=True)
    assert port == int(address.rsplit(":", 1)[1]) and host


@pytest.mark.parametrize("address,expected", [("127.0.0.1:8765", ("127.0.0.1", 8765)),
                                              ("[::1]:9000", ("::1", 9000)),
                                              ("localhost:7000", ("127.0.0.1", 7000)),
                                              ("127.8.9.10:1", ("127.8.9.10", 1))])
def test_parse_tcp_accepts_loopback(address: str, expected: tuple[str, int]) -> None:
    assert parse_tcp(address, allow_remote=False) == expected


@pytest.mark.parametrize("address", ["8765", "127.0.0.1", "127.0.0.1:http", ":80",
                                     "127.0.0.1:70000"])
def test_parse_tcp_names_a_malformed_address(address: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_tcp(address, allow_remote=False)
