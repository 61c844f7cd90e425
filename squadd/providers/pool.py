"""The HTTP providers' connection pool: httpx's transport over a pool that does one pass a request.

httpcore's pool walks every connection on each request and each answer, asks every idle one
whether its socket became readable (a `poll` system call each), and counts the connections once
per idle connection (quadratic in the pool's size). `LeanConnectionPool` keeps its rules — a
bound on connections and on idle ones, keep-alive expiry, a server-closed connection never
reused — but asks only the connection it is about to hand out, newest first.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import httpcore
import httpx

DEFAULT_MAX_CONNECTIONS = 100
"""Connections to one provider at most (httpx's own default); all of them may stay open idle,
so that a pool of sessions busier than httpx's 20 kept-alive ones does not reconnect per turn."""
KEEPALIVE_EXPIRY_S = 5.0
"""How long an idle connection is kept (httpx's default)."""


class LeanConnectionPool(httpcore.AsyncConnectionPool):
    """`httpcore.AsyncConnectionPool` with an assignment pass linear in its connections that
    checks for expiry only the idle connection it hands out, and the oldest idle one (idle
    connections are handed out newest first, so the oldest are the ones whose keep-alive runs
    out: one check a pass closes them in turn, as httpcore's check of all of them did)."""

    def _assign_requests_to_connections(self) -> list[httpcore.AsyncConnectionInterface]:
        closing: list[httpcore.AsyncConnectionInterface] = []
        kept: list[httpcore.AsyncConnectionInterface] = []
        idle = 0
        for connection in self._connections:
            if connection.is_closed():
                continue
            if connection.is_idle():
                if idle >= self._max_keepalive_connections or (
                        idle == 0 and connection.has_expired()):
                    closing.append(connection)
                    continue
                idle += 1
            kept.append(connection)
        self._connections = kept
        # A connection handed to a request that has not started on it yet still looks
        # available: skip those too (HTTP/1.1 takes one request at a time), or the second
        # request handed the same one finds it busy and goes round the pool again.
        busy = {id(request.connection) for request in self._requests
                if request.connection is not None}
        for pool_request in [request for request in self._requests if request.is_queued()]:
            origin = pool_request.request.url.origin
            found = self._available(origin, closing, busy)
            if found is None:
                if len(self._connections) >= self._max_connections:
                    # An idle one not already handed to a request that has yet to start on it.
                    spare = next((c for c in self._connections
                                  if c.is_idle() and id(c) not in busy), None)
                    if spare is None:
                        continue  # stays queued until an answer frees a connection
                    self._connections.remove(spare)
                    closing.append(spare)
                found = self.create_connection(origin)
                self._connections.append(found)
            busy.add(id(found))
            pool_request.assign_to_connection(found)
        return closing

    def _available(self, origin: httpcore.Origin, closing: list[Any], busy: set[int],
                   ) -> httpcore.AsyncConnectionInterface | None:
        """The newest connection not in `busy` that can take a request to `origin` now;
        expired ones met on the way (keep-alive ran out, or the server closed it) go to
        `closing`."""
        for connection in reversed(list(self._connections)):
            if id(connection) in busy or not (connection.can_handle_request(origin)
                                              and connection.is_available()):
                continue
            if connection.has_expired():
                self._connections.remove(connection)
                closing.append(connection)
                continue
            return connection
        return None


class LeanTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (its request, response and error mapping) over `LeanConnectionPool`."""

    def __init__(self, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S):
        limits = httpx.Limits(max_connections=max_connections,
                              max_keepalive_connections=max_connections,
                              keepalive_expiry=keepalive_expiry_s)
        super().__init__(limits=limits)
        # The SSL context httpx just built for its own pool (loading the CA bundle is the
        # costly part of making one), not a second one.
        self.pool = self._pool = LeanConnectionPool(
            ssl_context=self._pool._ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry)


def default_transport() -> httpx.AsyncBaseTransport | None:
    """The transport a provider's client uses when none is given: `LeanTransport`, unless the
    environment names a proxy (then None: httpx's own transports, which route through it)."""
    return None if urllib.request.getproxies() else LeanTransport()
