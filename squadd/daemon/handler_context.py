"""What the daemon's HTTP handlers share: the `DaemonContext` they reach, `ApiError`, JSON
answers, and reading a request's body and query (bounded, with errors that name the problem).
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from squadd import telemetry
from squadd.contracts.events import BaseEvent
from squadd.daemon.wire import RECENT_EVENTS_MAX
from squadd.errors import ApiError, InvalidNameError, UntrustedInputError
from squadd.runtime.events import Subscription
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import safe_id
from squadd.state.transcripts import read_tail, read_transcript
from squadd.untrusted import parse_json

if TYPE_CHECKING:
    from squadd.daemon.coordinator import Coordinator
    from squadd.daemon.live_settings import LiveSettings

log = structlog.get_logger("squadd.daemon")

MAX_BODY_BYTES = 4 * 1024 * 1024
PARSE_IN_THREAD_BYTES = 64 * 1024
"""A body larger than this is parsed and checked in a worker thread, off the event loop."""
RECENT_EVENTS = RECENT_EVENTS_MAX




@dataclass
class DaemonContext:
    """What the handlers reach: the runtime, and the daemon's own state and stop switch."""

    runtime: SquadRuntime
    request_stop: Callable[[str], None]
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.monotonic)
    stopping: bool = False
    streams: set[Subscription] = field(default_factory=set)
    """The API's open event streams (`/v1/events`)."""
    dashboard_streams: set[Subscription] = field(default_factory=set)
    """The dashboard's open event streams: a budget of their own, so that browser tabs never
    lock `squadd events` or `squadd top` out."""
    recent: deque[BaseEvent] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    """The latest events, replayed to a stream that asks for `recent=N`."""
    coordinator: Coordinator | None = None
    """In cluster mode: the coordinator of the workers (status lists them)."""
    live_settings: LiveSettings | None = None
    """The settings files read again while it runs (`squadd reload`, status's notes)."""

    def __post_init__(self) -> None:
        self.runtime.bus.add_listener(self.recent.append)

    def close_streams(self) -> None:
        """End every event stream (the daemon is stopping)."""
        for subscription in [*self.streams, *self.dashboard_streams]:
            subscription.close()


def json_answer(data: Any, status: int = 200,
                headers: dict[str, str] | None = None) -> JSONResponse:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    try:
        return JSONResponse(data, status_code=status, headers=headers)
    except ValueError:  # a NaN or infinity (a tool's details, an old transcript): JSON has none
        return JSONResponse(_finite(data), status_code=status, headers=headers)


def _finite(data: Any) -> Any:
    """`data` with every NaN or infinite float as null, as pydantic writes them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(value) for value in data]
    return data


def error_answer(status: int, message: str, **fields: Any) -> JSONResponse:
    return json_answer({"error": message, **fields}, status)


Handler = Callable[[Request], Awaitable[Response]]


def answering_errors(handler: Handler) -> Handler:
    """`ApiError` becomes its JSON answer; anything else is logged and answered with a 500.
    A request's `traceparent` header makes the spans it causes part of the caller's trace."""
    async def endpoint(request: Request) -> Response:
        try:
            with telemetry.continued(request.headers.get("traceparent")):
                return await handler(request)
        except ApiError as exc:
            return error_answer(exc.status, str(exc), **exc.fields)
        except Exception:
            log.exception("request failed", method=request.method, path=request.url.path)
            return error_answer(500, f"squadd failed on {request.method} {request.url.path}: the "
                               "traceback is in the daemon's log")
    endpoint.__name__ = handler.__name__
    return endpoint


def context_of(request: Request) -> DaemonContext:
    context: DaemonContext = request.app.state.daemon
    return context


async def read_json(request: Request, limit: int = MAX_BODY_BYTES) -> Any:
    """The request's JSON body ({} when empty); 413 past `limit` bytes, 400 when not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise ApiError(400, f"bad Content-Length header {declared[:40]!r}")
        if len(declared.lstrip("0")) > len(str(limit)) or int(declared) > limit:
            raise ApiError(413, f"request body of {declared[:40]} bytes is over the {limit}-byte "
                                "limit", limit=limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"request body is over the {limit}-byte limit", limit=limit)
    if not body.strip():
        return {}
    data = bytes(body)
    try:
        if len(data) > PARSE_IN_THREAD_BYTES:
            return await anyio.to_thread.run_sync(parse_json, data)
        return parse_json(data)
    except UntrustedInputError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None


async def object_body(request: Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(422, f"request body must be a JSON object, not {type(body).__name__}")
    return body


def invalid(what: str, exc: ValidationError) -> ApiError:
    fields = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(body)"
        message = "required, but missing" if error["type"] == "missing" else error["msg"]
        fields.append({"field": where, "message": message})
    listed = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return ApiError(422, f"invalid {what}: {listed}", fields=fields)


def flag(request: Request, name: str, default: bool) -> bool:
    value = request.query_params.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise ApiError(422, f"query parameter {name}={value[:40]!r} must be 1 or 0")


def query_count(request: Request, name: str, *, limit: int) -> int | None:
    """A whole-number query parameter (None when absent), at most `limit`."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(422, f"query parameter {name}={raw[:40]!r} must be a whole number")
    digits = raw.lstrip("0") or "0"  # no int() of a 5000-digit string: past the limit anyway
    return limit if len(digits) > len(str(limit)) else min(int(digits), limit)


async def transcript_records(runtime: SquadRuntime, session_id: str, tail: int | None = None,
                             ) -> tuple[list[dict[str, Any]], int]:
    """The records of a session's transcript, or its last `tail` ones, and how many it holds
    (none when it has no file, or its id could not name one), read off the event loop."""
    try:
        path = runtime.layout.transcript(safe_id(session_id))
        if tail is not None:
            return await anyio.to_thread.run_sync(read_tail, path, tail)
        records = (await anyio.to_thread.run_sync(read_transcript, path)).records
        return records, len(records)
    except (FileNotFoundError, InvalidNameError):
        return [], 0
