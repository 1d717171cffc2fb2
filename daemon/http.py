"""The daemon's one HTTP port: /metrics, /healthz, /readyz (other pages add routes).

/healthz and /readyz are answered even past the connection caps (``_probe``)."""

from __future__ import annotations

import json

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from .web.conn_guard import ConnectionGuard, GuardedSite, connection_cap


def build_app(server, registry: CollectorRegistry) -> web.Application:
    """``registry``: every collector already registered on it (daemon/wiring.py)."""
    from .web.guard import guard

    cfg = server.config.http
    conns = ConnectionGuard(max_connections=connection_cap(cfg.max_connections),
                            max_per_client=cfg.max_connections_per_client, probe_slots=cfg.probe_slots,
                            probe=lambda path: _probe(server, path),
                            header_timeout_s=cfg.header_timeout_s, refused=server.stats.http_refused)
    app = web.Application(client_max_size=64 * 1024 * 1024,
                          middlewares=[conns.middleware, guard(server, cfg, cfg.token())])
    app["server"] = server
    app["conn_guard"] = conns

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        status, body = _probe(server, "/healthz")
        return web.Response(body=body, status=status, content_type="application/json")

    async def readyz(request: web.Request) -> web.Response:
        status, body = _probe(server, "/readyz")
        return web.Response(body=body, status=status, content_type="application/json")

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    from .web import add_routes  # the run pages: /, /runs/<id>, /analyze, /api/*
    add_routes(app, server)
    return app


def _probe(server, path: str) -> tuple[int, bytes]:
    """``/healthz`` or ``/readyz``: (status, JSON body); also answered to a connection past
    the connection caps (web/conn_guard.py), so a kubelet's probe is never refused."""
    if path == "/healthz":
        return 200, b'{"status": "ok"}'
    failing = server.store.failing  # run state and alerts are not being written
    ready = server.ready and not server.stopping and not failing
    body = {"ready": ready}
    if failing:
        body["reason"] = "persistence failing: the store has committed nothing lately"
    return 200 if ready else 503, json.dumps(body).encode()


async def start_site(app: web.Application, host: str, port: int, *,
                     keepalive_timeout_s: float = 15.0) -> tuple[web.AppRunner, int]:
    """Serves ``app`` through its ``ConnectionGuard`` (web/conn_guard.py)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False,
                           keepalive_timeout=keepalive_timeout_s)
    await runner.setup()
    site = GuardedSite(runner, host, port, app["conn_guard"])
    await site.start()
    bound = site._server.sockets[0].getsockname()[1] if site._server else port
    return runner, bound
