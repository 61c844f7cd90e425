"""Who may see the dashboard: `DashboardGuard` checks the token on every request under `/ui`
(constant-time), refuses a foreign Host (DNS rebinding) and any action that could come from
another origin (CSRF), and sends headers that keep the page to itself (no CORS, a strict CSP).

The token travels in a header (`Authorization: Bearer` or `X-Squadd-Token`). A plain GET may
carry it as `?token=` instead, because a browser's first page load and `EventSource` cannot set
headers; an action (POST) never may, and its Origin, when sent, must be the page's own.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from squadd.daemon.handler_context import error_answer

__all__ = ["DASHBOARD_HEADERS", "TOKEN_PARAM", "UI_TOKEN_HEADER", "DashboardGuard", "UiPortOnly"]

UI_TOKEN_HEADER = "x-squadd-token"
TOKEN_PARAM = "token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD"})

DASHBOARD_HEADERS: dict[str, str] = {
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "cross-origin-resource-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
}
"""Sent with every dashboard answer, refusals included. No Access-Control-* header, ever."""


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


def _host_name(host: str) -> str:
    """The host part of a Host header (`127.0.0.1:8765` -> `127.0.0.1`, `[::1]:80` -> `::1`)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _given_tokens(scope: Scope) -> Iterable[str]:
    authorization = _header(scope, b"authorization")
    if authorization.startswith("Bearer "):
        yield authorization[len("Bearer "):]
    header = _header(scope, UI_TOKEN_HEADER.encode())
    if header:
        yield header
    if scope.get("method") in SAFE_METHODS:
        query = bytes(scope.get("query_string") or b"").decode("latin-1")
        for key, value in parse_qsl(query):
            if key == TOKEN_PARAM:
                yield value


class DashboardGuard:
    """ASGI middleware in front of the dashboard's routes; see the module docstring."""

    def __init__(self, app: ASGIApp, token: str):
        if len(token) < 16:
            raise ValueError("the dashboard token must be at least 16 characters")
        self.app = app
        self._token = token.encode()

    def _token_ok(self, scope: Scope) -> bool:
        ok = False
        for given in _given_tokens(scope):  # compare every candidate: no early exit to time
            ok |= hmac.compare_digest(given.encode("latin-1", "replace"), self._token)
        return ok

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        method = scope.get("method", "GET")
        host = _header(scope, b"host")
        if _host_name(host) not in LOOPBACK_HOSTS:
            return 403, (f"Host {host[:80]!r} is not a loopback address: the dashboard answers "
                         "only to http://127.0.0.1:PORT or http://localhost:PORT")
        if method == "OPTIONS":
            return 405, "the dashboard answers no cross-origin requests (no CORS)"
        if method not in SAFE_METHODS:
            origin = _header(scope, b"origin")
            if origin and (urlsplit(origin).netloc != host or urlsplit(origin).scheme != "http"):
                return 403, f"Origin {origin[:80]!r} is not this dashboard: action refused"
            if _header(scope, b"sec-fetch-site") in ("cross-site", "same-site"):
                return 403, "a request from another site: action refused"
        if not self._token_ok(scope):
            if method not in SAFE_METHODS and TOKEN_PARAM + "=" in \
                    bytes(scope.get("query_string") or b"").decode("latin-1"):
                return 401, ("an action needs the token in the X-Squadd-Token header; a token "
                             "in the URL is accepted only to read")
            return 401, ("missing or wrong dashboard token: open the URL that 'squadd ui' "
                         "prints (it carries the token)")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in DASHBOARD_HEADERS.items():
                    headers[name] = value
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            response = error_answer(*refusal)
            if refusal[0] == 401:
                response.headers["www-authenticate"] = "Bearer"
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


class UiPortOnly:
    """The app as the dashboard's own port serves it: the dashboard's paths, nothing else."""

    def __init__(self, app: ASGIApp, prefix: str):
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            if path == "/":
                response = error_answer(404, f"the dashboard is at {self.prefix}/ (open the URL "
                                             "that 'squadd ui' prints)")
                await response(scope, receive, send)
                return
            if path != self.prefix and not path.startswith(self.prefix + "/"):
                response = error_answer(404, f"no such page: {path[:80]}")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
