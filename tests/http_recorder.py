"""A real local HTTP server that records requests, standing in for Slack and webhook endpoints.

``Recorder`` listens on 127.0.0.1 (a free port), records every request (method,
path, headers, body) and answers from a script of ``Reply`` values, then with the
default reply. ``slack_replies`` spells Slack's answers. ``wait_for(n)`` waits on an
event, with a deadline, for ``n`` requests: no sleeps as synchronisation.

>>> Reply(429, "rate_limited", {"Retry-After": "1"}).status
429
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from aiohttp import web


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: str = "ok"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # answer this late (a slow server, for timeout tests)


SLACK = {
    "ok": Reply(200, "ok"),
    "invalid_payload": Reply(400, "invalid_payload"),
    "channel_not_found": Reply(404, "channel_not_found"),
    "no_service": Reply(404, "no_service"),
    "channel_is_archived": Reply(410, "channel_is_archived"),
    "rate_limited": Reply(429, "rate_limited", {"Retry-After": "1"}),
    "rollup_error": Reply(500, "rollup_error"),
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


class Recorder:
    """A real aiohttp server; ``check(request) -> Reply | None`` may override the script."""

    def __init__(self, script: list[Reply] | None = None, default: Reply = Reply(),
                 check: Callable[[Request], Reply | None] | None = None) -> None:
        self.script = list(script or [])
        self.default = default
        self.check = check
        self.requests: list[Request] = []
        self._arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> "Recorder":
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, request: web.Request) -> web.Response:
        req = Request(request.method, request.path, dict(request.headers), await request.read(), time.time())
        self.requests.append(req)
        self._arrived.set()
        reply = (self.check(req) if self.check else None) or (self.script.pop(0) if self.script else self.default)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        return web.Response(status=reply.status, text=reply.body, headers=dict(reply.headers))

    async def wait_for(self, n: int, timeout: float = 60.0) -> list[Request]:
        """Wait until ``n`` requests arrived; raises TimeoutError with what did arrive (the
        timeout guards a hang: a loaded machine may take seconds)."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(self.requests)} of {n} requests arrived within {timeout}s")
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                pass
        return self.requests[:n]

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "Recorder":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class ThreadedRecorder:
    """A ``Recorder`` served from its own event-loop thread, for synchronous tests.

    ``requests(path)`` is a snapshot of what arrived at ``path``; ``script``/``default``
    may be changed between requests (``set_default``).
    """

    def __init__(self, script: list[Reply] | None = None, default: Reply = Reply()) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.rec = asyncio.run_coroutine_threadsafe(Recorder(script, default).start(), self.loop).result(10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.rec.port}"

    def requests(self, path: str | None = None) -> list[Request]:
        return [r for r in list(self.rec.requests) if path is None or r.path == path]

    def set_default(self, reply: Reply) -> None:
        self.loop.call_soon_threadsafe(setattr, self.rec, "default", reply)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.rec.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
