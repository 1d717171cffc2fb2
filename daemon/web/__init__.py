"""The run pages on the daemon's HTTP port: `/`, `/runs/<id>`, `/analyze`, and their JSON.

``add_routes(app, server)`` is the one call `daemon/http.py` makes. Pages are HTML
(``pages.py``: one shell around each page's ``<main>``) + JS under ``static/`` (uPlot
vendored, no CDN, no build step) that poll the JSON API every two seconds. Read-only: the only POST, `/api/analyze`, changes no daemon state.
With shards, each run (and the list) carries this daemon's ``shard`` name
(docs/SHARDING.md). See docs/HTTP.md.
"""

from __future__ import annotations

import asyncio
import json
import time

import structlog
from aiohttp import web

from ..incarnations import SEP, archived_of
from ..store import history
from . import pages, views
from .analyze import AnalyzeError, analyze_file, private_tmpdir, save_upload

STATIC = pages.STATIC
POLL_MS = 2000
DEFAULT_LIMIT = 500
log = structlog.get_logger("wtwind.web")

_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def add_routes(app: web.Application, server) -> None:
    h = Handlers(server)
    r = app.router
    r.add_get("/", h.page("index"), name="web.index")
    r.add_get("/runs/{run:.+}", h.page("run"), name="web.run")
    r.add_get("/analyze", h.page("analyze"), name="web.analyze")
    r.add_get("/compare", h.page("compare"), name="web.compare")
    r.add_get("/api/runs", h.runs, name="web.api_runs")
    r.add_get("/api/runs/{run:.+}", h.run, name="web.api_run")
    r.add_post("/api/analyze", h.analyze, name="web.api_analyze")
    r.add_static("/static/", STATIC, name="web.static", append_version=False)
    app.on_response_prepare.append(_security_headers)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    route = request.match_info.route
    if route.name and route.name.startswith("web."):
        response.headers.update(_HEADERS)


class Handlers:
    def __init__(self, server) -> None:
        self.server = server
        self._analyze_slots = asyncio.Semaphore(2)   # uploads streaming to disk at once
        self._parse_slot = asyncio.Semaphore(1)      # files parsed and replayed in memory at once

    def page(self, name: str):
        async def handler(request: web.Request) -> web.Response:
            return web.Response(body=pages.render(name), content_type="text/html", charset="utf-8",
                                headers={"Cache-Control": "no-cache"})
        return handler

    def _store_path(self) -> str | None:
        store = self.server.store
        return store.path if store.durable else None

    async def runs(self, request: web.Request) -> web.Response:
        """Live runs and, from the store, the history past the TTLs: ``?status=a,b&q=&limit=``."""
        statuses = {x for x in request.query.get("status", "").split(",") if x}
        if statuses - set(views.STATUSES):
            return _json({"error": f"status must be among {', '.join(views.STATUSES)}"}, 400)
        q = request.query.get("q", "")[:200]
        try:
            limit = min(max(int(request.query.get("limit", DEFAULT_LIMIT)), 1), history.MAX_LIMIT)
        except ValueError:
            return _json({"error": "limit must be an integer"}, 400)
        table = self.server.table
        live = [d for d in (views.run_summary(r) for r in table) if views.matches(d, statuses, q)]
        stored, matching, path = [], 0, self._store_path()
        want = {"running" if s == "idle" else s for s in statuses if s not in ("running", "stalled")}
        if path is not None and (want or not statuses):
            loop = asyncio.get_running_loop()
            got = await loop.run_in_executor(None, lambda: history.list_runs(
                path, statuses=sorted(want), q=q, limit=limit, skip=[r.run for r in table]))
            stored = [d for d in map(views.stored_summary, got["runs"]) if views.matches(d, statuses, q)]
            matching = max(got["matching"], len(stored))
            for d in live:
                d["fired"] = got["fired"].get(d["run"], {})
        runs = views.ordered(live + stored)[:limit]
        shard = self._shard()
        for d in runs:
            d["shard"] = shard
        return _json({"now": time.time(), "poll_ms": POLL_MS, "stored": path is not None,
                      "shard": shard, "total": len(live) + matching, "runs": runs})

    async def run(self, request: web.Request) -> web.Response:
        name = request.match_info["run"]
        r = self.server.table.get(name)
        shard = self._shard()
        path = self._store_path()
        if r is not None:
            out = views.run_detail(r, self._spectral(r))
            if getattr(r, "restored", False) and path is not None:   # its stored history first
                rec = await asyncio.get_running_loop().run_in_executor(None, history.run_record, path, name)
                out = views.with_stored(out, rec, r.series.train.columns())
            return _json({"now": time.time(), "poll_ms": POLL_MS, "stored": False, "shard": shard,
                          **out, "names": self._names(name)})
        rec = None
        if path is not None:
            rec = await asyncio.get_running_loop().run_in_executor(None, history.run_record, path, name)
        if rec is None:
            where = "" if shard is None else (
                f" on shard {shard} (a run lives on the shard its name picks: "
                f"python -m wtwin.emitters shard RUN ENDPOINTS)")
            return _json({"error": f"no run named {name!r}, live or stored{where}", "shard": shard}, 404)
        return _json({"now": time.time(), "poll_ms": POLL_MS, "stored": True, "shard": shard,
                      **views.stored_detail(rec), "names": self._names(name)})

    def _names(self, name: str) -> dict:
        """The other runs of ``name`` (daemon/incarnations.py): ``earlier``, newest first,
        and, for an archived ``<name>~<n>``, the ``current`` run of its name."""
        names = {r.run for r in self.server.table} | set(self.server.store.runs)
        base, sep, n = name.rpartition(SEP)
        current = base if sep and n.isdigit() and base in names else None
        return {"earlier": archived_of(name, names), "current": current}

    def _shard(self) -> str | None:
        """This daemon's shard name (``[shard] name``; None for a single daemon)."""
        return self.server.config.shard.name

    def _spectral(self, r):
        """The run's last job result (per-layer alpha), else its watch's last summary."""
        res, watch, jobs = r.spectral_result, r.spectral, self.server.config.jobs
        band = {"band": (jobs.alpha_min, jobs.alpha_max)}
        if res and not res.get("layers") and watch is not None and watch.last is not None:
            last = watch.last
            why = res.get("error") or res.get("reason") or res.get("outcome")
            return {"step": last.step, "outcome": res.get("outcome"), "layer_alpha": last.layer_alpha,
                    "outside": last.outside, "alpha_mean": last.alpha_mean,
                    "error": f"the checkpoint of step {res.get('step')} was not analysed ({why})", **band}
        if res:
            return {**res, **band}
        return watch

    async def analyze(self, request: web.Request) -> web.Response:
        # another site's page posting here is refused before this (web/guard.py)
        loop = asyncio.get_running_loop()
        async with self._analyze_slots:
            with private_tmpdir() as tmp:
                try:
                    path, name, preset = await save_upload(request, tmp,
                                                           self.server.config.http.body_timeout_s)
                    t0 = time.perf_counter()
                    async with self._parse_slot:  # the parse's memory is bounded in total, not per upload
                        out = await loop.run_in_executor(None, analyze_file, path, name, preset,
                                                         self.server.config.detection.preset)
                except AnalyzeError as e:
                    return _json({"error": str(e)}, 400)
                except Exception:  # a detector bug: say so on the page, keep the trace in the log
                    log.exception("analyze_failed")
                    return _json({"error": "the detectors failed on this file; the daemon log has "
                                           "the details."}, 500)
        out["forecast_wait"] = views.no_forecast(out["preset"], out["series"])
        out["elapsed_s"] = round(time.perf_counter() - t0, 3)
        log.info("log_analyzed", points=out["points"], elapsed_s=out["elapsed_s"],
                 alerts=sum(out["alerts"].values()))
        return _json(out)


def _json(data, status: int = 200) -> web.Response:
    resp = web.json_response(data, status=status, headers={"Cache-Control": "no-store"}, dumps=_dumps)
    resp.enable_compression()   # gzip/deflate when the client accepts it (series are ~100 KiB)
    return resp


def _dumps(obj) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))
