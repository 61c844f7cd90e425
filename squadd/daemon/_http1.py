"""One HTTP/1.1 exchange with the daemon over its Unix socket (or TCP), standard library only.

The blocking client's calls are one request and one answer each, so it needs no connection
pool and no HTTP library: importing httpx (and what it pulls in) costs a short command such as
`squadd status` several times the interpreter's own start-up. Each exchange opens a
connection, sends the request with `Connection: close`, reads the answer (`Content-Length`,
chunked, or up to the close) and closes. Streams (`/v1/events`) still go through httpx.
"""

from __future__ import annotations

import _socket as socket  # the C module `socket` wraps: `socket`'s enums cost a status call 3 ms
import json
import struct
import time
from urllib.parse import urlencode

TYPE_CHECKING = False  # `typing` is not imported at run time: `squadd status` starts fast
if TYPE_CHECKING:
    from typing import Any

MAX_TARGET_BYTES = 65536
"""The longest request target sent; a longer one is refused before connecting."""
TOO_LONG = "a name or id that long is not one squadd made"
"""The hint a `DaemonError` for a request target too long gives."""
MAX_HEAD_BYTES = 65536
"""The most an answer's status line and headers may take."""
MAX_BODY_BYTES = 256 * 1024 * 1024
"""The most an answer's body may take (the daemon's answers are bounded far below this)."""


class ExchangeError(Exception):
    """An exchange that failed; `kind` says how: `invalid` (the request cannot be sent),
    `connect` (nothing listens), `timeout` (no connection or no answer in time), or
    `broken`."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Answer:
    """The daemon's answer: its status code and body (what `read_answer` reads). A plain
    class: `dataclasses` imports `inspect`, which costs `squadd status` a tenth of its time."""

    __slots__ = ("content", "status_code")

    def __init__(self, status_code: int, content: bytes):
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def exchange(*, uds: str | None, tcp: str | None, method: str, path: str,
             params: dict[str, str] | None, body: Any, headers: dict[str, str],
             timeout: float, connect_timeout: float) -> Answer:
    """Send one request and read its answer (`ExchangeError` when that fails)."""
    target = path + ("?" + urlencode(params) if params else "")
    if len(target) > MAX_TARGET_BYTES:
        raise ExchangeError("invalid", f"the URL is {len(target)} characters, over the "
                                       f"{MAX_TARGET_BYTES} a request may take ({TOO_LONG})")
    if any(c in target for c in " \r\n"):
        raise ExchangeError("invalid", f"the URL {target[:100]!r} holds a space or line break")
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n"):  # named, not shown: it may be the token
            raise ExchangeError("invalid", f"the {name!r} header holds a line break")
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    lines = [f"{method} {target} HTTP/1.1", f"Host: {tcp or 'squadd'}", "Connection: close",
             "Accept: application/json", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines.append("Content-Type: application/json")
    if body is not None or method in ("POST", "PUT", "PATCH"):  # RFC 9110 8.6: a POST says 0
        lines.append(f"Content-Length: {len(payload)}")
    try:
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + payload
    except UnicodeEncodeError as exc:  # a lone surrogate: undecodable bytes from argv or env
        raise ExchangeError("invalid", f"the request holds {exc.object[exc.start:exc.end]!r}, "
                                       "which is no character") from None
    sock = _connect(uds, tcp, connect_timeout)
    try:
        deadline = time.monotonic() + timeout
        sock.settimeout(timeout)
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError) as exc:
            # The daemon may answer before it has read the whole request (a 413 for a body
            # over its limit) and close: that answer, if it came, says more than the pipe.
            try:
                return _read_answer(_Reader(sock, deadline), method)
            except (ExchangeError, OSError):
                raise exc from None
        return _read_answer(_Reader(sock, deadline), method)
    except TimeoutError:
        raise ExchangeError("timeout", f"no answer within {timeout:g}s") from None
    except OSError as exc:
        raise ExchangeError("broken", str(exc) or type(exc).__name__) from None
    except ValueError as exc:  # defensive: the checks above leave `int` nothing to refuse
        raise ExchangeError("broken", f"a malformed answer: {exc}") from None
    finally:
        sock.close()


def _connect(uds: str | None, tcp: str | None, timeout: float) -> socket.socket:
    if uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # A Unix socket whose backlog is full (the daemon busy, not gone) fails a connect with a
        # Python timeout at once (EAGAIN); a blocking one waits for room, up to SO_SNDTIMEO.
        seconds = max(timeout, 1e-6)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                        struct.pack("@ll", int(seconds), int(seconds % 1 * 1_000_000)))
        address: Any = uds
    else:
        host, _, port = (tcp or "").rpartition(":")
        if not host or not port.isdigit():
            raise ExchangeError("invalid", f"{tcp!r} is not HOST:PORT")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.settimeout(timeout)
        address = (host.strip("[]"), int(port))
    try:
        sock.connect(address)
    except (TimeoutError, BlockingIOError):
        sock.close()
        busy = " (its socket's backlog is full: the daemon is busy)" if uds is not None else ""
        raise ExchangeError("timeout", f"no connection within {timeout:g}s{busy}") from None
    except OSError as exc:
        sock.close()
        raise ExchangeError("connect", str(exc)) from None
    return sock


class _Reader:
    """The answer's bytes as they arrive, all by `deadline` (a `time.monotonic()` value): a
    daemon that trickles its answer cannot stretch the exchange past its timeout. The buffer
    is a `bytearray` so that a long answer costs time in proportion to its length (a `bytes`
    buffer copied itself on every `recv`)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock = sock
        self.deadline = deadline
        self.buffer = bytearray()
        self.closed = False

    def _more(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        chunk = self.sock.recv(65536)
        if not chunk:
            self.closed = True
        self.buffer += chunk

    def _take(self, count: int, skip: int = 0) -> bytes:
        found = bytes(self.buffer[:count])
        del self.buffer[:count + skip]
        return found

    def until(self, marker: bytes, limit: int) -> bytes:
        while (end := self.buffer.find(marker)) < 0:
            if len(self.buffer) > limit or self.closed:
                raise ExchangeError("broken", "the answer ended or grew too long before "
                                              f"{marker!r}")
            self._more()
        return self._take(end, len(marker))

    def exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if self.closed:
                raise ExchangeError("broken", f"the answer ended {count - len(self.buffer)} "
                                              "bytes short")
            self._more()
        return self._take(count)

    def rest(self) -> bytes:
        while not self.closed:
            if len(self.buffer) > MAX_BODY_BYTES:
                raise ExchangeError("broken", "the answer is too long")
            self._more()
        return self._take(len(self.buffer))


def _count(text: bytes | str, base: int = 10) -> int:
    """A length or chunk size: digits only (no sign, space or `_`, which `int` would take)."""
    digits = "0123456789abcdefABCDEF"[:10 if base == 10 else 22]
    raw = text.decode("latin-1") if isinstance(text, bytes) else text
    if not raw or raw.strip(digits):
        raise ExchangeError("broken", f"a malformed answer: {raw[:40]!r} is not a length")
    return int(raw, base)


def _read_head(reader: _Reader) -> tuple[int, dict[str, str]]:
    """A status line and its fields; a field sent twice is joined with ", " (RFC 9110 5.3)."""
    head = reader.until(b"\r\n\r\n", MAX_HEAD_BYTES).decode("latin-1").split("\r\n")
    parts = head[0].split(" ", 2)
    if (len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3
            or not parts[1].isascii() or not parts[1].isdigit()):
        raise ExchangeError("broken", f"not an HTTP answer: {head[0][:100]!r}")
    fields: dict[str, str] = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        name, value = name.strip().lower(), value.strip()
        fields[name] = f"{fields[name]}, {value}" if name in fields else value
    return int(parts[1]), fields


def _read_answer(reader: _Reader, method: str) -> Answer:
    """The final answer, its body framed as RFC 9112 6.3 says: interim (1xx) answers are
    skipped, and an answer to HEAD, a 204 or a 304 has no body whatever its fields say."""
    status, fields = _read_head(reader)
    while 100 <= status < 200:
        status, fields = _read_head(reader)
    codings = [c.strip().lower() for c in fields.get("transfer-encoding", "").split(",")]
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif codings[-1] == "chunked":
        chunks: list[bytes] = []
        total = 0
        while size := _count(reader.until(b"\r\n", 1024).split(b";")[0].strip(), 16):
            total += size
            if total > MAX_BODY_BYTES:
                raise ExchangeError("broken", "the answer is too long")
            chunks.append(reader.exactly(size))
            if reader.exactly(2) != b"\r\n":
                raise ExchangeError("broken", "a malformed answer: a chunk of "
                                              f"{size} bytes does not end there")
        body = b"".join(chunks)
    elif "content-length" in fields and "transfer-encoding" not in fields:
        lengths = {value.strip() for value in fields["content-length"].split(",")}
        if len(lengths) != 1:
            raise ExchangeError("broken", "a malformed answer: Content-Length "
                                          f"{fields['content-length'][:40]!r} disagrees")
        length = _count(lengths.pop())
        if length > MAX_BODY_BYTES:
            raise ExchangeError("broken", "the answer is too long")
        body = reader.exactly(length)
    else:  # no length given, or a coding other than chunked last: the body ends at the close
        body = reader.rest()
    return Answer(status, body)
