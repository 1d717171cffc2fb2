"""``wtwind alerts``: the one dead-letter CLI (the alert outbox: ls, dead, redeliver, purge).

Reading the store (``ls``, ``dead``) works while the daemon runs (SQLite WAL readers
never block it). ``redeliver`` goes through a running daemon's HTTP API (``POST
/api/alerts/redeliver``, with the ``[http]`` token), since the daemon owns the store and
its outbox's memory; with the daemon stopped it writes the store itself (the rows are
sent at the next start). ``dead --url`` and ``redeliver --url`` ask the daemon at that
address, whichever outbox it runs (memory or SQLite). ``purge`` needs the daemon
stopped (it takes the owner lock). ``replay`` is ``redeliver``'s old name, kept for
scripts: it says so on stderr, then redelivers.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from wtwin.sinks.redact import redact_url

from ..errors import ConfigError
from ..store.db import Lock, open_db, open_readonly

_KEYS = ("id", "sink", "state", "attempts", "run", "kind", "status", "step", "key", "last_error")


def add_parser(sub) -> None:
    al = sub.add_parser("alerts", help="the alert outbox: ls | dead | redeliver [ID...] | purge")
    al.add_argument("action", choices=("ls", "dead", "redeliver", "purge", "replay"),
                    help="replay: deprecated name of redeliver")
    al.add_argument("ids", nargs="*", type=int, help="delivery row ids (redeliver)")
    al.add_argument("--all", action="store_true", help="redeliver every dead row")
    al.add_argument("--sink", help="only this sink")
    al.add_argument("--state", dest="row_state", choices=("pending", "delivered", "dead"))
    al.add_argument("--older-than-days", type=float, default=0.0,
                    help="purge: only delivered rows older than this")
    al.add_argument("--url", help="a running wtwind's HTTP address (default: [http] of the config)")
    al.add_argument("--token-file", help="file holding the daemon's [http] token (redeliver)")
    al.add_argument("--json", action="store_true", help="machine-readable output")


def run(args, cfg) -> int:
    if args.action == "replay":
        print("wtwind: `alerts replay` is deprecated, use `alerts redeliver`", file=sys.stderr)
        args.action = "redeliver"
    if args.action == "redeliver":
        return _redeliver(args, cfg)
    if args.action == "dead" and args.url:
        return _print(_over_http("dead", args, cfg)["dead"], args.json)
    if args.action in ("ls", "dead"):
        state = "dead" if args.action == "dead" else args.row_state
        return _print(_from_store(open_readonly(cfg.state.path), state, args.sink), args.json)
    return _purge(cfg.state.path, args.older_than_days)


# ---- reading -------------------------------------------------------------------------------
def _from_store(conn, state, sink) -> list[dict]:
    where, params = [], []
    if state:
        where, params = ["d.state = ?"], [state]
    if sink:
        where.append("d.sink = ?")
        params.append(sink)
    sql = ("SELECT d.id, d.sink, d.state, d.attempts, a.run, a.kind, a.status, a.step, a.key, d.last_error "
           "FROM deliveries d JOIN alerts a ON a.key = d.key"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY d.id")
    return [dict(zip(_KEYS, r)) for r in conn.execute(sql, params)]


def _from_api(row: dict) -> dict:
    a = row["alert"]
    return {"id": row["id"], "sink": row["sink"], "state": "dead", "attempts": row["attempts"], "run": a["run"],
            "kind": a["kind"], "status": a["status"], "step": a["step"], "key": row["idempotency_key"],
            "last_error": row["last_error"]}


def _print(rows: list[dict], as_json: bool) -> int:
    for r in rows:  # rows written before errors were redacted
        r["last_error"] = redact_url(r["last_error"] or "")
    if as_json:
        print(json.dumps(rows))
        return 0
    print("ID\tSINK\tSTATE\tATTEMPTS\tRUN\tKIND\tSTATUS\tSTEP\tKEY\tLAST ERROR")
    for r in rows:
        print("\t".join(str(r[k]) for k in _KEYS))
    return 0


# ---- the running daemon's HTTP API -------------------------------------------------------------
def _over_http(action: str, args, cfg) -> dict:
    import aiohttp  # only for the commands that talk to a daemon

    url = (args.url or f"http://{cfg.http.host}:{cfg.http.port}").rstrip("/")
    token = open(args.token_file).read().strip() if args.token_file else cfg.http.token()
    params = {k: v for k, v in (("sink", args.sink), ("ids", ",".join(map(str, args.ids)))) if v}
    try:
        status, body = asyncio.run(_call(action, url, params, token))
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise ConfigError(f"cannot reach {url}: {exc}") from None
    if status != 200:
        raise ConfigError(f"{body.get('error', status)}")
    if action == "dead":
        body["dead"] = [_from_api(r) for r in body["dead"]]
    return body


async def _call(action: str, url: str, params: dict, token: str | None) -> tuple[int, dict]:
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        method = s.get if action == "dead" else s.post
        async with method(f"{url}/api/alerts/{action}", params=params, headers=headers) as resp:
            try:
                return resp.status, await resp.json()
            except (aiohttp.ContentTypeError, json.JSONDecodeError):
                return resp.status, {"error": f"HTTP {resp.status}"}


# ---- writing -------------------------------------------------------------------------------------
def _redeliver(args, cfg) -> int:
    if not args.ids and not args.all:
        raise ConfigError("alerts redeliver: give delivery row ids (see `wtwind alerts dead`) or --all")
    if args.url or _daemon_running(cfg.state.path):
        n = _over_http("redeliver", args, cfg)["redelivered"]
        print(f"redelivered {n} dead alert(s)")
        return 0
    from ..store.deliveries import SqliteOutbox

    async def go() -> int:
        box = SqliteOutbox(cfg.state.path)
        try:
            return await box.redeliver(args.sink, None if args.all else args.ids, now=time.time())
        finally:
            await box.aclose()

    n = asyncio.run(go())
    print(f"redelivered {n} dead alert(s); they are sent when wtwind next starts")
    return 0


def _purge(path: str, older_than_days: float) -> int:
    try:
        conn, lock = open_db(path)
    except ConfigError as exc:
        if "locked" in str(exc):
            raise ConfigError(f"{exc}; stop wtwind first (reading commands work while it runs)") from None
        raise
    try:
        cutoff = time.time() - older_than_days * 86400
        conn.execute("BEGIN")
        n = conn.execute("DELETE FROM deliveries WHERE state = 'delivered' AND updated_at <= ?",
                         (cutoff,)).rowcount
        conn.execute("DELETE FROM alerts WHERE created_at <= ? AND key NOT IN (SELECT key FROM deliveries)",
                     (cutoff,))
        conn.execute("COMMIT")
    finally:
        conn.close()
        lock.release()
    print(f"purged {n} delivered row(s)")
    return 0


def _daemon_running(path: str) -> bool:
    if not os.path.exists(path):
        return False
    lock = Lock(path)
    try:
        lock.acquire()
    except ConfigError:
        return True
    lock.release()
    return False
