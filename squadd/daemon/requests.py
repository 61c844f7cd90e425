"""What the daemon's HTTP handlers share: the `DaemonContext` they reach, `ApiError`, JSON
answers, and reading a request's body and query (bounded, with errors that name the problem).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from squadd.daemon.wire import RECENT_EVENTS_MAX
from squadd.runtime.events import BaseEvent, Subscription
from squadd.runtime.runtime import SquadRuntime

log = structlog.get_logger("squadd.daemon")

MAX_BODY_BYTES = 4 * 1024 * 1024
RECENT_EVENTS = RECENT_EVENTS_MAX


class ApiError(Exception):
    """Raised by a handler: becomes `{"error": message, **fields}` with `status`."""

    def __init__(self, status: int, message: str, **fields: Any):
        super().__init__(message)
        self.status = status
        self.fields = fields


@dataclass
class DaemonContext:
    """What the handlers reach: the runtime, and the daemon's own state and stop switch."""

    runtime: SquadRuntime
    request_stop: Callable[[str], None]
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.monotonic)
    stopping: bool = False
    streams: set[Subscription] = field(default_factory=set)
    recent: deque[BaseEvent] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    """The latest events, replayed to a stream that asks for `recent=N`."""

    def __post_init__(self) -> None:
        self.runtime.bus.add_listener(self.recent.append)

    def close_streams(self) -> None:
        """End every event stream (the daemon is stopping)."""
        for subscription in list(self.streams):
            subscription.close()


def json_answer(data: Any, status: int = 200,
                headers: dict[str, str] | None = None) -> JSONResponse:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    return JSONResponse(data, status_code=status, headers=headers)


def error_answer(status: int, message: str, **fields: Any) -> JSONResponse:
    return json_answer({"error": message, **fields}, status)


Handler = Callable[[Request], Awaitable[Response]]


def guarded(handler: Handler) -> Handler:
    """`ApiError` becomes its JSON answer; anything else is logged and answered with a 500."""
    async def endpoint(request: Request) -> Response:
        try:
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
        if not declared.isdigit():
            raise ApiError(400, f"bad Content-Length header {declared[:40]!r}")
        if int(declared) > limit:
            raise ApiError(413, f"request body of {declared} bytes is over the {limit}-byte "
                                "limit", limit=limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"request body is over the {limit}-byte limit", limit=limit)
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
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
    raise ApiError(422, f"query parameter {name}={value!r} must be 1 or 0")
