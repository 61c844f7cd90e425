"""The wire format between the daemon and its clients: endpoint paths, timeouts, how an answer
is read (or turned into `DaemonRequestError`), and how a Server-Sent Events stream is parsed.

Both `client.DaemonClient` and `client.AsyncDaemonClient` build their requests from `Calls`;
the daemon's app shares the stream constants. Only the standard library is used.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from urllib.parse import quote

from squadd.errors import DaemonError, DaemonRequestError

TYPE_CHECKING = False  # neither `typing` nor `dataclasses` at run time: `squadd status` is fast
if TYPE_CHECKING:
    from typing import Any, Protocol

    class Response(Protocol):
        """What `read_answer` reads: an httpx response, or the blocking client's `Answer`."""

        @property
        def status_code(self) -> int: ...

        @property
        def text(self) -> str: ...

        def json(self) -> Any: ...

API = "/v1"
DEFAULT_TIMEOUT_S = 10.0
"""Seconds an ordinary call (health, status, cancel...) may take."""
ROUTE_WAIT_LIMIT_S = 86_400.0
"""The longest a waiting route or resume is waited on (the daemon's own timeouts come first)."""
SSE_HEARTBEAT_S = 5.0
"""The daemon sends a comment line this often on an idle event stream."""
SSE_READ_TIMEOUT_S = 4 * SSE_HEARTBEAT_S
"""An event stream silent for this long (no heartbeat either) means the daemon is gone."""
SUBSCRIBED = "subscribed"
"""The comment an event stream starts with once its subscription is in place."""
TOKEN_HEADER = "authorization"
RECENT_EVENTS_MAX = 512
"""The daemon keeps this many past events for `recent=N` (`squadd events` without --follow)."""




class Call:
    """One request, built the same way by both clients. `result_key`: an error answer whose
    body has this key is a structured result, returned as it is."""

    __slots__ = ("body", "headers", "method", "params", "path", "result_key", "timeout")

    def __init__(self, method: str, path: str, params: dict[str, str] | None = None, *,
                 body: Any = None, timeout: float = DEFAULT_TIMEOUT_S,
                 result_key: str | None = None, headers: dict[str, str] | None = None):
        self.headers: dict[str, str] = headers if headers is not None else {}
        """Sent besides the client's own (a caller's `traceparent`)."""
        self.method = method
        self.path = path
        self.params: dict[str, str] = params if params is not None else {}
        self.body = body
        self.timeout = timeout
        self.result_key = result_key

    def __repr__(self) -> str:
        return f"Call({self.method} {self.path})"


def wait_timeout(body: Mapping[str, Any]) -> float:
    if body.get("waitForResult", True) is False:
        return DEFAULT_TIMEOUT_S * 3
    return ROUTE_WAIT_LIMIT_S


class Calls:
    """The endpoints, as `Call` objects; the clients send them and read the answers."""

    @staticmethod
    def health() -> Call:
        return Call("GET", f"{API}/health")

    @staticmethod
    def status(agent: str | None, include_ended: bool) -> Call:
        params = {"all": "1" if include_ended else "0"}
        if agent:
            params["agent"] = agent
        return Call("GET", f"{API}/sessions", params)

    @staticmethod
    def session(session_id: str, transcript: bool, tail: int | None) -> Call:
        params = {"transcript": "1" if transcript else "0"}
        if tail is not None:
            params["tail"] = str(tail)
        return Call("GET", f"{API}/sessions/{quote(session_id, safe='')}", params)

    @staticmethod
    def route(body: Mapping[str, Any], view: bool = False) -> Call:
        """`view`: the answer carries the session's `SessionView` too, as `session`."""
        return Call("POST", f"{API}/route", {"view": "session"} if view else None,
                    body=dict(body), timeout=wait_timeout(body), result_key="ok")

    @staticmethod
    def resume(session_id: str, wait: bool, view: bool = False) -> Call:
        params = {"wait": "1" if wait else "0"}
        if view:
            params["view"] = "session"
        return Call("POST", f"{API}/sessions/{quote(session_id, safe='')}/resume", params,
                    timeout=ROUTE_WAIT_LIMIT_S if wait else DEFAULT_TIMEOUT_S * 3,
                    result_key="ok")

    @staticmethod
    def land(session_id: str) -> Call:
        # A landing waits its turn behind others and may run the test suite (land_check).
        return Call("POST", f"{API}/sessions/{quote(session_id, safe='')}/land",
                    timeout=ROUTE_WAIT_LIMIT_S, result_key="ok")

    @staticmethod
    def reload() -> Call:
        return Call("POST", f"{API}/reload", timeout=DEFAULT_TIMEOUT_S * 3,
                    result_key="ok")

    @staticmethod
    def cancel(session_id: str) -> Call:
        return Call("POST", f"{API}/sessions/{quote(session_id, safe='')}/cancel")

    @staticmethod
    def tools(agent: str | None = None, session_id: str | None = None) -> Call:
        params: dict[str, str] = {}
        if agent:
            params["agent"] = agent
        if session_id:
            params["session"] = session_id
        return Call("GET", f"{API}/tools", params)

    @staticmethod
    def call_tool(name: str, arguments: Mapping[str, Any], agent: str | None,
                  session_id: str | None, timeout: float,
                  traceparent: str | None = None) -> Call:
        body: dict[str, Any] = {"arguments": dict(arguments)}
        if agent:
            body["agent"] = agent
        if session_id:
            body["sessionId"] = session_id
        return Call("POST", f"{API}/tools/{quote(name, safe='')}", body=body, timeout=timeout,
                     result_key="result_type",
                     headers={"traceparent": traceparent} if traceparent else None)

    @staticmethod
    def approval(approval_id: str, approved: bool, reason: str) -> Call:
        return Call("POST", f"{API}/approvals/{quote(approval_id, safe='')}",
                     body={"approved": approved, "reason": reason})

    @staticmethod
    def inbox(include_resolved: bool) -> Call:
        return Call("GET", f"{API}/inbox", {"all": "1"} if include_resolved else {})

    @staticmethod
    def inbox_item(item_id: str) -> Call:
        return Call("GET", f"{API}/inbox/{quote(item_id, safe='')}")

    @staticmethod
    def inbox_resolve(item_id: str, action: str, *, answer: str = "",
                      budget: float | None = None, reason: str = "") -> Call:
        """Resolve an inbox item: the action, and what it carries (fields left empty out)."""
        body: dict[str, Any] = {"action": action}
        if answer:
            body["answer"] = answer
        if budget is not None:
            body["budget"] = budget
        if reason:
            body["reason"] = reason
        return Call("POST", f"{API}/inbox/{quote(item_id, safe='')}", body=body)

    @staticmethod
    def dashboard() -> Call:
        return Call("GET", f"{API}/dashboard")

    @staticmethod
    def ui() -> Call:
        return Call("GET", f"{API}/ui")

    @staticmethod
    def variable(name: str, value: str) -> Call:
        return Call("POST", f"{API}/variables/{quote(name, safe='')}", body={"value": value})

    @staticmethod
    def shutdown() -> Call:
        return Call("POST", f"{API}/shutdown")

    @staticmethod
    def events(types: Sequence[str] | None, session_id: str | None, recent: int,
               follow: bool, reserve: bool = False) -> Call:
        params = {"recent": str(recent), "follow": "1" if follow else "0"}
        if reserve:
            params["reserve"] = "route"
        if types:
            params["type"] = ",".join(types)
        if session_id:
            params["session"] = session_id
        return Call("GET", f"{API}/events", params, timeout=SSE_READ_TIMEOUT_S)


def read_answer(call: Call, response: Response) -> Any:
    """The JSON of a good answer (or of a structured result). A refusal or error answer
    raises `DaemonRequestError`; a good answer that is not JSON (cut short, garbled, or a
    bare `null`) raises `DaemonError`."""
    try:
        payload = response.json()
    except (ValueError, RecursionError):
        payload = None
    if response.status_code < 400:
        if payload is None:  # the daemon answers JSON: this one was cut short or garbled
            raise DaemonError(f"the daemon's answer to {call.method} {call.path} is not JSON: "
                              f"{response.text[:200]!r} (did the daemon stop? 'squadd status' "
                              "tells)")
        return payload
    if call.result_key and isinstance(payload, dict) and call.result_key in payload:
        return payload
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        message = payload["error"]
    else:
        message = (f"the daemon answered {call.method} {call.path} with HTTP "
                   f"{response.status_code}: {response.text[:300]}")
    raise DaemonRequestError(message, status=response.status_code,
                             payload=payload if isinstance(payload, dict) else None)


class SSEParser:
    """Turns the lines of a `text/event-stream` into event dicts (and notes comments)."""

    def __init__(self) -> None:
        self.data: list[str] = []
        self.subscribed = False

    def feed(self, line: str) -> dict[str, Any] | None:
        if not line:
            if not self.data:
                return None
            text, self.data = "\n".join(self.data), []
            try:
                event = json.loads(text)
            except (ValueError, RecursionError):  # not an event: the stream goes on
                return None
            return event if isinstance(event, dict) else None
        if line.startswith(":"):
            if line[1:].strip() == SUBSCRIBED:
                self.subscribed = True
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self.data.append(value[1:] if value.startswith(" ") else value)
        return None


def route_wire(task: str, agent: str | None, context: str | None, priority: str, wait: bool,
               model: str | None, session_id: str | None,
               available_tools: Sequence[str] | None, timeout_s: float | None,
               isolation: str | None = None, land: bool = False) -> dict[str, Any]:
    """The body of `POST /v1/route`: `RouteRequest.wire()` with the fields given. The daemon
    validates it (its 422 names each bad field), so nothing is checked twice."""
    from squadd.contracts.routes import RouteRequest

    given: dict[str, Any] = {
        "task": task, "priority": priority, "wait_for_result": wait, "target_agent": agent,
        "context": context, "model": model, "session_id": session_id, "timeout_s": timeout_s,
        "available_tools": list(available_tools) if available_tools is not None else None,
        "isolation": isolation, "land": land or None,
    }
    return RouteRequest.model_construct(
        **{name: value for name, value in given.items() if value is not None}).wire()


def iter_events(lines: Iterator[str], parser: SSEParser) -> Iterator[dict[str, Any]]:
    """The events in an event stream's lines, past those `parser` has read."""
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


async def aiter_events(lines: AsyncIterator[str],
                        parser: SSEParser) -> AsyncIterator[dict[str, Any]]:
    async for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


def subscribed(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Read an event stream's `lines` up to the comment saying its subscription is in place
    (at once, not when iterated), and return the events of the rest."""
    parser = SSEParser()
    for line in lines:
        parser.feed(line)
        if parser.subscribed:
            break
    return iter_events(lines, parser)


async def asubscribed(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """As `subscribed`, for a stream read asynchronously."""
    parser = SSEParser()
    async for line in lines:
        parser.feed(line)
        if parser.subscribed:
            break
    return aiter_events(lines, parser)
