"""The daemon's socket from the blocking client's side: addresses that fit (AF_UNIX paths are
limited to 107 bytes, and a repo can live deeper than that: a longer path is reached through
its open folder as `/proc/self/fd/N/NAME`), and `Connection`, the standard library's
`http.client` over that socket (or TCP) with a deadline over each whole exchange. httpx costs
a short command such as `squadd status` several times the interpreter's start-up to import;
`http.client` a fraction of that.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from squadd.daemon.wire import Call

TYPE_CHECKING = False  # no `typing` at run time: `squadd status` starts fast
if TYPE_CHECKING:
    from typing import Any

MAX_UNIX_PATH_BYTES = 107
"""The longest path `bind` and `connect` accept on Linux (108 bytes with the NUL)."""


class SocketAddress:
    """The path to bind or connect to for `path`; keep the object alive while it is in use."""

    def __init__(self, path: Path):
        self.path = path
        self._dir_fd: int | None = None
        if len(os.fsencode(path)) <= MAX_UNIX_PATH_BYTES:
            self.usable = str(path)
        else:
            # Raises FileNotFoundError when the folder is missing: nothing can listen there.
            self._dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self.usable = f"/proc/self/fd/{self._dir_fd}/{path.name}"

    @property
    def aliased(self) -> bool:
        """True when the path was too long and `usable` goes through the folder's fd."""
        return self._dir_fd is not None

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def __enter__(self) -> SocketAddress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RequestRefused(ValueError):
    """A request refused before connecting: it could not be sent as it is."""


class NotListening(OSError):
    """Nothing accepts connections at the address: no daemon runs there."""


MAX_TARGET_BYTES = 65536
"""The longest request target sent; a longer one is refused before connecting."""
TOO_LONG = "a name or id that long is not one squadd made"


def check_request(target: str, headers: Mapping[str, str]) -> None:
    """Refuse (`RequestRefused`) a target or header that would split the request's own lines,
    or a target too long; a header is named, never shown: it may carry the token."""
    if len(target) > MAX_TARGET_BYTES:
        raise RequestRefused(f"the URL is {len(target)} characters, over the "
                             f"{MAX_TARGET_BYTES} a request may take ({TOO_LONG})")
    if any(c in target for c in " \r\n"):
        raise RequestRefused(f"the URL {target[:100]!r} holds a space or line break")
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n"):
            raise RequestRefused(f"the {name!r} header holds a line break")
        try:
            (name + value).encode("latin-1")
        except UnicodeEncodeError as exc:  # a lone surrogate: undecodable bytes from the env
            raise RequestRefused(f"the {name!r} header holds "
                                 f"{exc.object[exc.start:exc.end]!r}, which is no character"
                                 ) from None


class _Deadline:
    """A connected socket as `http.client` uses it (`sendall`, `makefile`, `close`), each read
    and write bounded by what is left until `deadline` (a `time.monotonic()` value, which its
    owner may move): a daemon that trickles its answer cannot stretch an exchange past its
    timeout. As with a socket, `close` leaves the socket open while a reader made from it is."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline
        self.readers = 0
        self.closed = False

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the time for the answer ran out")
        return left

    def sendall(self, data: bytes) -> None:
        self.sock.settimeout(self.left())
        self.sock.sendall(data)

    def makefile(self, mode: str = "rb", **_: object) -> io.BufferedReader:
        self.readers += 1
        return io.BufferedReader(_Reader(self))

    def close(self) -> None:
        self.closed = True
        if self.readers == 0:
            self.sock.close()


class _Reader(io.RawIOBase):
    def __init__(self, owner: _Deadline):
        self.owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.owner.sock.settimeout(self.owner.left())
        return self.owner.sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self.owner.readers -= 1
            if self.owner.closed and self.owner.readers == 0:
                self.owner.sock.close()


class Connection(http.client.HTTPConnection):
    """One HTTP/1.1 connection to the daemon through the standard library: over the Unix
    socket `uds`, else to `host:port`. Every read and write ends by `deadline`."""

    def __init__(self, host: str, *, uds: str | None, connect_timeout: float, timeout: float):
        super().__init__(host, timeout=connect_timeout)
        self.uds = uds
        self.limit = timeout
        self.reader: _Deadline | None = None

    def connect(self) -> None:
        if self.uds is None:
            try:
                sock = socket.create_connection((self.host, self.port), self.timeout)
            except ConnectionRefusedError as exc:
                raise NotListening(str(exc)) from None
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # A Unix socket whose backlog is full (the daemon busy, not gone) fails a connect
            # with a timeout at once (EAGAIN); a blocking one waits for room, up to SO_SNDTIMEO.
            seconds = max(float(self.timeout), 1e-6)  # type: ignore[arg-type]
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                            struct.pack("@ll", int(seconds), int(seconds % 1 * 1_000_000)))
            try:
                sock.connect(self.uds)
            except (TimeoutError, BlockingIOError):
                sock.close()
                raise TimeoutError(f"no connection within {seconds:g}s (its socket's backlog "
                                   "is full: the daemon is busy)") from None
            except OSError as exc:
                sock.close()
                raise NotListening(str(exc)) from None
        self.reader = _Deadline(sock, time.monotonic() + self.limit)
        self.sock = self.reader


class Answer:
    """What `read_answer` reads of a blocking exchange: status and body. A plain class:
    `dataclasses` imports `inspect`, which costs `squadd status` a tenth of its time."""

    __slots__ = ("content", "status_code")

    def __init__(self, status_code: int, content: bytes):
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def open_exchange(call: Call, *, uds: str | None, tcp: str | None, headers: dict[str, str],
                  limit: float, close: bool = True) -> tuple[Connection, http.client.HTTPResponse]:
    """Send `call` on a new connection and read its answer's head; the caller reads the body
    and closes the connection. `close`: ask the daemon to close it after the answer."""
    from urllib.parse import urlencode

    target = call.path + ("?" + urlencode(call.params) if call.params else "")
    headers = {"Accept": "application/json", **headers, **call.headers}
    if close:
        headers["Connection"] = "close"
    check_request(target, headers)
    body = None
    if call.body is not None:
        body = json.dumps(call.body, separators=(",", ":")).encode()
        headers["Content-Type"] = "application/json"
    connection = Connection(tcp or "squadd", uds=uds, timeout=limit,
                            connect_timeout=min(limit, 5.0))
    try:
        try:
            connection.request(call.method, target, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError) as exc:
            # The daemon may answer before it has read the whole request (a 413 for a body
            # over its limit) and close: that answer, if it came, says more than the pipe.
            try:
                return connection, connection.getresponse()
            except Exception:
                raise exc from None
        return connection, connection.getresponse()
    except BaseException:
        connection.close()
        raise


def stream_lines(connection: Connection, response: http.client.HTTPResponse,
                 idle_s: float) -> Iterator[str]:
    """An event stream's lines, each within `idle_s` of the one before (the daemon sends a
    heartbeat well within it)."""
    assert connection.reader is not None
    while True:
        connection.reader.deadline = time.monotonic() + idle_s
        line = response.readline()
        if not line:
            return
        yield line.decode("utf-8", errors="replace").rstrip("\r\n")
