"""Connections to the HTTP port: a cap on how many are open, and a deadline for each
request's headers.

aiohttp waits for headers forever and keeps an idle connection for an hour, so a client
that opens connections and trickles bytes (slowloris) holds a file descriptor each, until
the daemon can accept neither ``/healthz`` nor new trainers. Here:

- at most ``max_connections`` are open (the daemon's ZeroMQ sockets and store need file
  descriptors too); one more is closed at once, counted as ``connections``;
- a connection must start a request (its headers complete) within ``header_timeout_s`` of
  opening, or of its previous request's end; otherwise it is closed, counted as
  ``slow_headers``. A request being handled is never cut here (uploads have
  ``body_timeout_s``).

The wrapper is a plain ``asyncio.Protocol`` that forwards every call to aiohttp's own
handler; the middleware tells it when a request starts and ends.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter

from aiohttp import web


class ConnectionGuard:
    def __init__(self, *, max_connections: int, header_timeout_s: float, refused: Counter) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.refused = refused
        self.open: dict[asyncio.BaseTransport, _Guarded] = {}

    def factory(self, make_handler):
        return lambda: _Guarded(self, make_handler())

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        conn = self.open.get(request.transport)
        if conn is None:
            return await handler(request)
        conn.busy += 1
        try:
            return await handler(request)
        finally:
            conn.busy -= 1
            conn.arm()


class _Guarded(asyncio.Protocol):
    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.busy = 0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        if len(self.guard.open) >= self.guard.max_connections:
            self.guard.refused["connections"] += 1
            transport.abort()
            return
        self.guard.open[transport] = self
        self.inner.connection_made(transport)
        self.arm()

    def arm(self) -> None:
        """A new request's headers are due within the timeout from now."""
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.guard.header_timeout_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.busy:            # a request is being handled: its end re-arms the deadline
            return
        if self.transport is not None and not self.transport.is_closing():
            self.guard.refused["slow_headers"] += 1
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.guard.open.pop(self.transport, None) is not None:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections go through a ``ConnectionGuard``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard) -> None:
        super().__init__(runner, host, port)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard.factory(self._runner.server), self._host, self._port, backlog=self._backlog)


def connection_cap(configured: int) -> int:
    """``configured``, but at most a quarter of the open-file limit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return configured
    return max(8, min(configured, soft // 4))
