"""The HTTP providers' connection pool: httpx's client over aiohttp's connector.

A provider builds its requests and reads its answers with httpx (one client API; tests swap in
`httpx.MockTransport`). What goes over the wire is aiohttp's: its connector keeps a bounded pool
of kept-alive connections and its HTTP parser is llhttp, in C. httpx's own transport (httpcore
and h11, pure Python) spent about six times the CPU on each call to a model server
(`scripts/bench/provider_http.py`). `AiohttpTransport` maps httpx's timeouts onto aiohttp's and
aiohttp's errors back onto httpx's, so callers see only httpx. It speaks HTTP/1.1 and needs
asyncio (squadd's loop); where the environment names a proxy, `default_transport` leaves httpx
its own transports, which route through it.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import httpx

DEFAULT_MAX_CONNECTIONS = 100
"""Connections to one provider at most (httpx's own default); all of them may stay open idle,
so that a pool of sessions busier than httpx's 20 kept-alive ones does not reconnect per turn."""
KEEPALIVE_EXPIRY_S = 5.0
"""How long an idle connection is kept (httpx's default)."""
_READ_CHUNK = 65536

_TimeoutKey = tuple[float | None, float | None, float | None]


class _Body(httpx.AsyncByteStream):
    """An answer's body as aiohttp reads it off the socket, its errors as httpx's."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request):
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while chunk := await self._response.content.read(_READ_CHUNK):
                yield chunk
        except Exception as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        # Read to its end, it goes back to the pool; stopped early (a limit), it is closed.
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx requests sent through one `aiohttp.ClientSession` of at most `max_connections`
    connections, idle ones kept `keepalive_expiry_s`. The session is made on first use, on the
    loop that uses it (so the transport can be built outside one)."""

    def __init__(self, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S,
                 ssl_context: ssl.SSLContext | None = None):
        self.max_connections = max_connections
        self.keepalive_expiry_s = keepalive_expiry_s
        self._ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[_TimeoutKey, aiohttp.ClientTimeout] = {}

    @property
    def connector(self) -> aiohttp.BaseConnector | None:
        """The pool (None before the first request)."""
        return None if self._session is None else self._session.connector

    def _open(self) -> aiohttp.ClientSession:
        if self._ssl_context is None:  # loading the CA bundle is the costly part: once
            self._ssl_context = httpx.create_ssl_context()
        connector = aiohttp.TCPConnector(
            limit=self.max_connections, limit_per_host=0,
            keepalive_timeout=self.keepalive_expiry_s, ssl=self._ssl_context)
        # httpx does the rest: cookies, redirects (not followed), decompression, the headers.
        self._session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=None), trust_env=False)
        return self._session

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        limits: dict[str, float | None] = request.extensions.get("timeout", {})
        key = (limits.get("pool"), limits.get("connect"), limits.get("read"))
        found = self._timeouts.get(key)
        if found is None:
            pool, connect, read = key
            # aiohttp's `connect` covers waiting for a free connection and opening one.
            waited = None if pool is None and connect is None else (pool or 0) + (connect or 0)
            found = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, connect=waited, sock_connect=connect, sock_read=read)
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session or self._open()
        body = await request.aread()
        headers = [(name.decode("latin-1"), value.decode("latin-1"))
                   for name, value in request.headers.raw]
        try:
            response = await session.request(
                request.method, str(request.url), headers=headers, data=body or None,
                allow_redirects=False, timeout=self._timeout(request))
        except Exception as exc:
            raise _as_httpx(exc, request) from exc
        return httpx.Response(response.status, headers=response.raw_headers,
                              stream=_Body(response, request), request=request,
                              extensions={"http_version": b"HTTP/1.1",
                                          "reason_phrase": (response.reason or "").encode()})

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _as_httpx(exc: Exception, request: httpx.Request) -> Exception:
    """aiohttp's (and the socket's) error as the httpx one a caller of httpx expects."""
    message = str(exc) or type(exc).__name__
    kind: type[httpx.TransportError]
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        kind = httpx.ConnectTimeout
    elif isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        kind = httpx.ReadTimeout
    elif isinstance(exc, aiohttp.ClientConnectorError):
        # The socket's own words (e.g. "Connection refused") are added by whoever reports it.
        kind, message = httpx.ConnectError, f"cannot connect to {exc.host}:{exc.port}"
    elif isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                          aiohttp.ClientResponseError)):
        kind = httpx.RemoteProtocolError
    elif isinstance(exc, (aiohttp.ClientOSError, OSError)):
        kind = httpx.ReadError
    elif isinstance(exc, aiohttp.InvalidURL):
        return httpx.InvalidURL(f"{message} ({request.url})")
    elif isinstance(exc, aiohttp.ClientError):
        kind = httpx.RemoteProtocolError
    else:
        return exc
    return kind(message, request=request)


def default_transport() -> httpx.AsyncBaseTransport | None:
    """The transport a provider's client uses when none is given: `AiohttpTransport`, unless
    the environment names a proxy (then None: httpx's own transports, which route through it)."""
    return None if urllib.request.getproxies() else AiohttpTransport()

