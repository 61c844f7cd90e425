"""Real HTTP model servers for tests: OpenAI-compatible and Anthropic-compatible.

Each listens on 127.0.0.1 on a free port, in a background thread, and answers from a scripted
queue of `Reply` objects (then, when one is set, from a responder callable). Every request is
logged with its arrival time and parsed JSON body.

    with OpenAIServer() as srv:
        srv.script(OpenAIServer.tool_call_turn(("squad_decide", {...})),
                   OpenAIServer.text_turn("done"))
        provider = OpenAIProvider(base_url=srv.url, ...)
        ...
        assert srv.requests[1].body["messages"][-1]["role"] == "tool"
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None
    """Sent as JSON (unless `raw` is set)."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Wait this long before answering (e.g. longer than the client's read timeout)."""
    drop: bool = False
    """Close the connection without sending anything."""
    drop_after_bytes: int | None = None
    """Send the headers (with the full Content-Length) and this many body bytes, then close."""
    raw: bytes | None = None
    """Send these bytes as the body, as they are (e.g. invalid JSON)."""


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body, or None when it was not JSON."""
    raw: bytes
    arrived: float
    """time.monotonic() when the request arrived."""
    client_port: int = 0
    """The port the request came from: one per client connection."""


Responder = Callable[[Any], "Reply | dict[str, Any]"]
"""Takes a request's JSON body, returns a `Reply` (or a dict: a 200 JSON answer)."""

ToolCallSpec = tuple[str, "dict[str, Any] | str"] | tuple[str, "dict[str, Any] | str", str]
"""(name, arguments) or (name, arguments, call id); string arguments are sent as they are."""


def unused_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for "connection refused")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class ModelServer(ABC):
    """A scripted HTTP server; subclasses fix the API's endpoint and reply shapes."""

    endpoint: ClassVar[str] = "/"
    api_root: ClassVar[str] = ""

    def __init__(self, responder: Responder | None = None, *, keep_bodies: bool = True) -> None:
        self._lock = threading.Lock()
        self.keep_bodies = keep_bodies
        """False: the request log keeps no bodies (a long run would hold every prompt)."""
        self._queue: deque[Reply] = deque()
        self._requests: list[ReceivedRequest] = []
        self._arrived = threading.Condition(self._lock)
        self._responder = responder
        self._stopping = threading.Event()
        self.errors: list[str] = []
        """Problems of the server itself (a responder that raised, an unexpected path)."""
        self._connections: set[socket.socket] = set()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name=f"{type(self).__name__}-{self.port}")
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Self:
        if not self._started:
            self._thread.start()
            self._started = True
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._started:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()
        with self._lock:  # idle keep-alive connections would keep their threads waiting
            connections, self._connections = set(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        port: int = self._httpd.server_address[1]
        return port

    @property
    def url(self) -> str:
        """The base URL a provider is given."""
        return f"http://127.0.0.1:{self.port}{self.api_root}"

    # -- scripting ---------------------------------------------------------------------------
    def script(self, *replies: Reply | dict[str, Any] | Iterable[Reply]) -> None:
        """Queue replies, answered in order; a dict is a 200 JSON body."""
        flat: list[Reply] = []
        for item in replies:
            if isinstance(item, Reply):
                flat.append(item)
            elif isinstance(item, dict):
                flat.append(Reply(body=item))
            else:
                flat.extend(item)
        with self._lock:
            self._queue.extend(flat)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer from `responder` once the scripted queue is empty."""
        with self._lock:
            self._responder = responder

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._queue)

    # -- what was received -------------------------------------------------------------------
    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def gaps(self) -> list[float]:
        """Seconds between consecutive request arrivals."""
        times = [r.arrived for r in self.requests]
        return [b - a for a, b in itertools.pairwise(times)]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[ReceivedRequest]:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self._requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._requests)} of {count} requests arrived "
                                       f"within {timeout}s")
                self._arrived.wait(left)
            return list(self._requests)

    # -- helpers every API shares --------------------------------------------------------------
    @classmethod
    @abstractmethod
    def error(cls, status: int, message: str, *, retry_after: str | float | None = None,
              kind: str = "error") -> Reply:
        """An error answer in the API's own shape, with `Retry-After` when given."""

    # -- serving (runs in the server's threads) ------------------------------------------------
    def _next_reply(self, request: ReceivedRequest) -> Reply:
        with self._lock:
            if request.path != self.endpoint:
                self.errors.append(f"unexpected path {request.path}")
                return self.error(404, f"test server: no endpoint {request.path} "
                                  f"(expected {self.endpoint})")
            if self._queue:
                return self._queue.popleft()
            responder = self._responder
        if responder is None:
            return self.error(418, "test server: the script is exhausted "
                              f"({len(self.requests)} requests received)")
        try:
            answer = responder(request.body)
        except Exception as exc:
            with self._lock:
                self.errors.append(f"responder raised {exc!r}")
            return self.error(418, f"test server: the responder raised {exc!r}")
        return answer if isinstance(answer, Reply) else Reply(body=answer)

    def _serve(self, handler: _Handler) -> None:
        arrived = time.monotonic()
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = ReceivedRequest(
            method=handler.command, path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()}, body=body, raw=raw,
            arrived=arrived, client_port=handler.client_address[1])
        with self._arrived:
            self._requests.append(request if self.keep_bodies
                                  else dataclasses.replace(request, body=None, raw=b""))
            self._arrived.notify_all()
        reply = self._next_reply(request)
        if reply.delay_s and self._stopping.wait(reply.delay_s):
            reply = Reply(drop=True)
        if reply.drop:
            _hang_up(handler)
            return
        payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        try:
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            if reply.drop_after_bytes is not None:
                handler.wfile.write(payload[:reply.drop_after_bytes])
                handler.wfile.flush()
                _hang_up(handler)
                return
            handler.wfile.write(payload)
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client gave up (e.g. its read timeout)


def _hang_up(handler: _Handler) -> None:
    handler.close_connection = True
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: ModelServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection is closed after this
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.owner._lock:
            self.server.owner._connections.add(self.connection)

    def finish(self) -> None:
        with self.server.owner._lock:
            self.server.owner._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_POST(self) -> None:
        self.server.owner._serve(self)

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        return None


class OpenAIServer(ModelServer):
    """Speaks `POST /v1/chat/completions`; `url` ends in /v1 like OpenAI's base URL."""

    endpoint = "/v1/chat/completions"
    api_root = "/v1"

    @staticmethod
    def text_turn(text: str, *, finish_reason: str = "stop", prompt_tokens: int = 11,
                  completion_tokens: int = 7, model: str = "test-model") -> Reply:
        return Reply(body=_openai_body({"role": "assistant", "content": text}, finish_reason,
                                       prompt_tokens, completion_tokens, model))

    @staticmethod
    def tool_call_turn(*calls: ToolCallSpec, text: str | None = None,
                       prompt_tokens: int = 11, completion_tokens: int = 7,
                       model: str = "test-model") -> Reply:
        tool_calls = []
        for call in calls:
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else f"call_{next(_ids)}"
            tool_calls.append({
                "id": call_id, "type": "function",
                "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                             else json.dumps(arguments)}})
        message = {"role": "assistant", "content": text, "tool_calls": tool_calls}
        return Reply(body=_openai_body(message, "tool_calls", prompt_tokens, completion_tokens,
                                       model))

    @classmethod
    def error(cls, status: int, message: str, *, retry_after: str | float | None = None,
              kind: str = "invalid_request_error") -> Reply:
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return Reply(status=status, headers=headers,
                     body={"error": {"message": message, "type": kind, "code": None}})


def _openai_body(message: dict[str, Any], finish_reason: str, prompt_tokens: int,
                 completion_tokens: int, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class AnthropicServer(ModelServer):
    """Speaks `POST /v1/messages`; `url` is the bare origin like Anthropic's base URL."""

    endpoint = "/v1/messages"
    api_root = ""

    @staticmethod
    def text_turn(text: str, *, stop_reason: str = "end_turn", input_tokens: int = 13,
                  output_tokens: int = 5, model: str = "test-claude") -> Reply:
        return Reply(body=_anthropic_body([{"type": "text", "text": text}], stop_reason,
                                          input_tokens, output_tokens, model))

    @staticmethod
    def tool_call_turn(*calls: ToolCallSpec, text: str | None = None, input_tokens: int = 13,
                       output_tokens: int = 5, model: str = "test-claude") -> Reply:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call in calls:
            call_id = call[2] if len(call) > 2 else f"toolu_{next(_ids)}"
            blocks.append({"type": "tool_use", "id": call_id, "name": call[0],
                           "input": call[1]})
        return Reply(body=_anthropic_body(blocks, "tool_use", input_tokens, output_tokens,
                                          model))

    @classmethod
    def error(cls, status: int, message: str, *, retry_after: str | float | None = None,
              kind: str = "invalid_request_error") -> Reply:
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return Reply(status=status, headers=headers,
                     body={"type": "error", "error": {"type": kind, "message": message}})


def _anthropic_body(blocks: list[dict[str, Any]], stop_reason: str, input_tokens: int,
                    output_tokens: int, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{next(_ids)}", "type": "message", "role": "assistant", "model": model,
        "content": blocks, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }
