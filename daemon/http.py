"""The daemon's one HTTP port: /metrics, /healthz, /readyz (other pages add routes)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest


def build_app(server, registry: CollectorRegistry) -> web.Application:
    """``registry``: every collector already registered on it (daemon/wiring.py)."""
    from .web.guard import guard

    app = web.Application(client_max_size=64 * 1024 * 1024,
                          middlewares=[guard(server, server.config.http, server.config.http.token())])
    app["server"] = server

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        failing = server.store.failing  # run state and alerts are not being written
        ready = server.ready and not server.stopping and not failing
        body = {"ready": ready}
        if failing:
            body["reason"] = "persistence failing: the store has committed nothing lately"
        return web.json_response(body, status=200 if ready else 503)

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    from .web import add_routes  # the run pages: /, /runs/<id>, /analyze, /api/*
    add_routes(app, server)
    return app


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1] if site._server else port
    return runner, bound
