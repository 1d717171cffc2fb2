"""Connections to the HTTP port: a cap on how many are open, and a deadline for each
request's headers.

aiohttp waits for headers forever and keeps an idle connection for an hour, so a client
that opens connections and trickles bytes (slowloris) holds a file descriptor each, until
the daemon can accept neither ``/healthz`` nor new trainers. Here:

- at most ``max_connections`` are open (the daemon's ZeroMQ sockets and store need file
  descriptors too), at most ``max_per_client`` from one address;
- a connection past either cap is not served, but it may still ask ``GET /healthz`` or
  ``GET /readyz`` (a kubelet's probe): it takes one of ``probe_slots``, its first line
  must arrive within ``PROBE_TIMEOUT_S``, and it is answered by ``probe(path)`` and
  closed. Anything else is closed, counted as ``connections`` or ``per_client``. With
  the slots full, the oldest waiting one goes (a probe sends its line at once; a
  trickler never does), so no number of held connections keeps the probes down;
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
from collections import Counter, OrderedDict
from typing import Callable

from aiohttp import web


PROBE_TIMEOUT_S = 2.0  # a connection past a cap must send its probe's first line within this
PROBE_PATHS = ("/healthz", "/readyz")
Probe = Callable[[str], tuple[int, bytes]]  # path -> (status, JSON body)


class ConnectionGuard:
    def __init__(self, *, max_connections: int, header_timeout_s: float, refused: Counter,
                 max_per_client: int | None = None, probe_slots: int = 32,
                 probe: Probe | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_client = max_per_client or max_connections
        self.header_timeout_s = header_timeout_s
        self.refused = refused
        self.probe, self.probe_slots = probe, probe_slots
        self.open: dict[asyncio.BaseTransport, _Guarded] = {}
        self.per_client: Counter = Counter()  # address -> connections open
        self.waiting: OrderedDict[asyncio.BaseTransport, _ProbeOnly] = OrderedDict()  # past a cap

    def factory(self, make_handler):
        return lambda: _Guarded(self, make_handler())

    def over_cap(self, client: str) -> str | None:
        """Why one more connection from ``client`` is not served, or None."""
        if len(self.open) >= self.max_connections:
            return "connections"
        if self.per_client[client] >= self.max_per_client:
            return "per_client"
        return None

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
        self.client = ""
        self.probe_only: _ProbeOnly | None = None  # past a cap: a probe or nothing
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.client = _address(transport)
        why = self.guard.over_cap(self.client)
        if why is not None:
            self.probe_only = _ProbeOnly(self.guard, transport, why)
            return
        self.guard.open[transport] = self
        self.guard.per_client[self.client] += 1
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
        if self.probe_only is not None:
            self.probe_only.lost()
            return
        if self._timer is not None:
            self._timer.cancel()
        if self.guard.open.pop(self.transport, None) is not None:
            self.guard.per_client[self.client] -= 1
            if self.guard.per_client[self.client] <= 0:
                del self.guard.per_client[self.client]
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.probe_only is not None:
            self.probe_only.data(data)
            return
        self.inner.data_received(data)

    def eof_received(self):
        if self.probe_only is not None:
            return None
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _ProbeOnly:
    """A connection past a cap: answered if its first line is a probe, else closed."""

    def __init__(self, guard: ConnectionGuard, transport, why: str) -> None:
        self.guard, self.transport, self.why = guard, transport, why
        self.buf = b""
        if guard.probe is None:
            self.refuse()
            return
        guard.waiting[transport] = self
        if len(guard.waiting) > guard.probe_slots:  # the oldest waiting one has had its chance
            guard.waiting.popitem(last=False)[1].refuse()
        self.timer = asyncio.get_running_loop().call_later(PROBE_TIMEOUT_S, self.refuse)

    def data(self, data: bytes) -> None:
        self.buf += data
        line, sep, _ = self.buf.partition(b"\r\n")
        if not sep:
            if len(self.buf) > 2048:
                self.refuse()
            return
        method, _, rest = line.decode("latin-1").partition(" ")
        path = rest.partition(" ")[0].partition("?")[0]
        if method not in ("GET", "HEAD") or path not in PROBE_PATHS:
            self.refuse()
            return
        status, body = self.guard.probe(path)
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Service Unavailable'}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode()
        self.transport.write(head + (body if method == "GET" else b""))
        self.close()

    def refuse(self) -> None:
        """Not a probe, or not in time: closed, counted as the cap it was past."""
        self.guard.refused[self.why] += 1
        self.transport.abort()
        self.lost()

    def close(self) -> None:
        self.transport.close()
        self.lost()

    def lost(self) -> None:
        self.guard.waiting.pop(self.transport, None)
        timer = getattr(self, "timer", None)
        if timer is not None:
            timer.cancel()
            self.timer = None


def _address(transport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, (tuple, list)) and peer else str(peer)


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
