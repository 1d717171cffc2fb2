"""HTTP endpoints for dead letters, on the daemon's one HTTP port.

``GET /api/alerts/dead[?sink=NAME]`` lists dead rows (JSON); ``POST
/api/alerts/redeliver[?sink=NAME][&ids=1,2]`` puts them (all, or those rows) back to
pending and returns how many (``{"redelivered": n}``); ``GET /api/sinks`` gives each
sink's health, disabled reason and outbox counts. The dead-letter CLI (``wtwind
alerts``, in ``daemon/ops/alerts.py``) redelivers through here while the daemon runs,
and lists through here with ``--url``; whichever outbox the daemon runs (memory or
SQLite), redelivery goes through the live delivery.

``POST /api/alerts/replay`` is the route's old name, kept for scripts: the same
redelivery, answered with a ``Deprecation: true`` header and the old ``replayed`` key
too, and logged once per call (WARNING ``deprecated_route``).
"""

from __future__ import annotations

import json

import structlog
from aiohttp import web

from .redact import redact_url

_log = structlog.get_logger("wtwin.sinks.api")


def row_json(row) -> dict:
    a = row.alert
    return {"id": row.id, "sink": row.sink, "attempts": row.attempts, "last_error": redact_url(row.last_error),
            "created_at": row.created_at, "updated_at": row.updated_at, "idempotency_key": row.idempotency_key,
            "alert": a.to_dict()}


def add_routes(app: web.Application, delivery) -> None:
    async def dead(request: web.Request) -> web.Response:
        sink = request.query.get("sink") or None
        if sink is not None and sink not in delivery.sinks:
            return web.json_response({"error": f"unknown sink {sink!r}"}, status=404)
        limit = request.query.get("limit", "1000")
        if not limit.isdigit() or not 0 < int(limit) <= 100_000:
            return web.json_response({"error": "limit must be a whole number from 1 to 100000"}, status=400)
        rows = await delivery.outbox.dead(sink, limit=int(limit))
        return web.json_response({"dead": [row_json(r) for r in rows]})

    async def redeliver(request: web.Request) -> web.Response:
        sink = request.query.get("sink") or None
        if sink is not None and sink not in delivery.sinks:
            return web.json_response({"error": f"unknown sink {sink!r}"}, status=404)
        try:
            ids = [int(i) for i in request.query["ids"].split(",")] if request.query.get("ids") else None
        except ValueError:
            return web.json_response({"error": "ids: a comma-separated list of row ids"}, status=400)
        return web.json_response({"redelivered": await delivery.redeliver(sink, ids)})

    async def replay_deprecated(request: web.Request) -> web.Response:
        _log.warning("deprecated_route", route="/api/alerts/replay", use="/api/alerts/redeliver")
        resp = await redeliver(request)
        body = json.loads(resp.body)
        if "redelivered" in body:
            body["replayed"] = body["redelivered"]
        return web.json_response(body, status=resp.status, headers={"Deprecation": "true"})

    async def sinks(request: web.Request) -> web.Response:
        health = await delivery.healthcheck()
        counts = delivery.outbox.counts()
        return web.json_response({"sinks": [
            {"name": name, "type": getattr(getattr(w.sink, "config", None), "type", None), "healthy": health[name],
             "disabled": w.disabled, "pending": counts.get((name, "pending"), 0),
             "dead": counts.get((name, "dead"), 0),
             "deliveries": {o: n for (s, o), n in delivery.counters.values.items() if s == name}}
            for name, w in delivery.workers.items()]})

    app.router.add_get("/api/sinks", sinks)
    app.router.add_get("/api/alerts/dead", dead)
    app.router.add_post("/api/alerts/redeliver", redeliver)
    app.router.add_post("/api/alerts/replay", replay_deprecated)
