"""Operator commands on the store: ``wtwind state ...``, ``wtwind alerts ...``, ``wtwind keys``.

Reading (``state ls|show``, ``alerts ls``) works while the daemon runs (SQLite WAL
readers never block it). Writing (``state forget``, ``alerts replay|purge``) takes the
database's owner lock, so it refuses while a daemon holds it; a running daemon's dead
letters are replayed through its HTTP API instead (``alerts replay --all``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import datetime, timezone

from ..errors import ConfigError
from . import codec
from .db import Lock, open_db, open_readonly


def add_commands(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="command", metavar="{state,alerts,keys}")
    st = sub.add_parser("state", help="runs in the store: ls | show RUN | forget RUN")
    st.add_argument("action", choices=("ls", "show", "forget"))
    st.add_argument("run", nargs="?", help="run id (show, forget)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    al = sub.add_parser("alerts", help="the alert outbox: ls | dead | replay [ID...] | purge")
    al.add_argument("action", choices=("ls", "dead", "replay", "purge"))
    al.add_argument("ids", nargs="*", type=int, help="delivery row ids (replay)")
    al.add_argument("--all", action="store_true", help="replay every dead row")
    al.add_argument("--sink", help="only this sink")
    al.add_argument("--state", dest="row_state", choices=("pending", "delivered", "dead"))
    al.add_argument("--older-than-days", type=float, default=0.0,
                    help="purge: only delivered rows older than this")
    al.add_argument("--json", action="store_true", help="machine-readable output")
    ky = sub.add_parser("keys", help="CURVE keys: generate a key pair (mode 0600)")
    ky.add_argument("action", choices=("generate",))
    ky.add_argument("--dir", default=".", help="where to write NAME.key and NAME.key_secret")
    ky.add_argument("--name", default="wtwind", help="file name stem")


def run_keys(args) -> int:
    from ..curve import generate_keys

    try:
        public, secret = generate_keys(args.dir, args.name)
    except OSError as exc:
        print(f"wtwind keys: cannot write keys in {args.dir}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"public key file: {public}\nsecret key file: {secret} (mode 0600; keep it private)")
    return 0


def run_command(args, cfg) -> int:
    try:
        if args.command == "state":
            return _state(args, cfg.state.path)
        return _alerts(args, cfg)
    except ConfigError as exc:
        print(f"wtwind {args.command}: {exc}", file=sys.stderr)
        return 1


# ---- state ------------------------------------------------------------------------------
def _state(args, path: str) -> int:
    if args.action in ("show", "forget") and not args.run:
        raise ConfigError(f"state {args.action}: which run? (wtwind state {args.action} RUN)")
    if args.action == "forget":
        return _forget(path, args.run)
    conn = open_readonly(path)
    if args.action == "ls":
        rows = conn.execute("SELECT run, status, preset, step, first_seen, last_seen FROM runs "
                            "ORDER BY last_seen DESC").fetchall()
        if args.json:
            keys = ("run", "status", "preset", "step", "first_seen", "last_seen")
            print(json.dumps([dict(zip(keys, r)) for r in rows]))
        else:
            print("RUN\tSTATUS\tPRESET\tSTEP\tLAST SEEN")
            for run, status, preset, step, _first, last in rows:
                print(f"{run}\t{status}\t{preset}\t{step}\t{_iso(last)}")
        return 0
    rec = conn.execute("SELECT run, status, preset, config, first_seen, last_seen, step, snapshot "
                       "FROM runs WHERE run = ?", (args.run,)).fetchone()
    if rec is None:
        print(f"wtwind state: no run {args.run!r} in {path}", file=sys.stderr)
        return 1
    out = dict(zip(("run", "status", "preset", "config", "first_seen", "last_seen", "step"), rec[:7]))
    out["config"] = json.loads(out["config"])
    out["snapshot"] = codec.decode(rec[7]) if rec[7] is not None else None
    out["alerts"] = [dict(zip(("key", "kind", "status", "step"), a)) for a in conn.execute(
        "SELECT key, kind, status, step FROM alerts WHERE run = ? ORDER BY created_at", (args.run,))]
    print(json.dumps(out, indent=None if args.json else 2, default=str))
    return 0


def _forget(path: str, run: str) -> int:
    conn, lock = _owned(path)
    try:
        n = conn.execute("DELETE FROM runs WHERE run = ?", (run,)).rowcount
    finally:
        conn.close()
        lock.release()
    if not n:
        print(f"wtwind state: no run {run!r} in {path}", file=sys.stderr)
        return 1
    print(f"forgot run {run!r} (its alert history is kept)")
    return 0


def _owned(path: str):
    try:
        return open_db(path)
    except ConfigError as exc:
        if "locked" in str(exc):
            raise ConfigError(f"{exc}; stop wtwind first (reading commands work while it runs)") from None
        raise


# ---- alerts -----------------------------------------------------------------------------
def _alerts(args, cfg) -> int:
    path = cfg.state.path
    if args.action in ("ls", "dead"):
        return _alerts_ls(open_readonly(path), "dead" if args.action == "dead" else args.row_state,
                          args.sink, args.json)
    if args.action == "replay":
        return _replay(args, cfg)
    conn, lock = _owned(path)
    try:
        cutoff = time.time() - args.older_than_days * 86400
        conn.execute("BEGIN")
        n = conn.execute("DELETE FROM deliveries WHERE state = 'delivered' AND updated_at <= ?",
                         (cutoff,)).rowcount
        conn.execute("DELETE FROM alerts WHERE created_at <= ? AND key NOT IN "
                     "(SELECT key FROM deliveries)", (cutoff,))
        conn.execute("COMMIT")
    finally:
        conn.close()
        lock.release()
    print(f"purged {n} delivered row(s)")
    return 0


def _alerts_ls(conn, state, sink, as_json: bool) -> int:
    where, params = [], []
    if state:
        where, params = ["d.state = ?"], [state]
    if sink:
        where.append("d.sink = ?")
        params.append(sink)
    sql = ("SELECT d.id, d.sink, d.state, d.attempts, d.next_attempt_at, d.last_error, a.key, a.run, "
           "a.kind, a.status, a.step FROM deliveries d JOIN alerts a ON a.key = d.key"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY d.id")
    keys = ("id", "sink", "state", "attempts", "next_attempt_at", "last_error", "key", "run",
            "kind", "status", "step")
    from wtwin.sinks.base import redact_url  # rows written before errors were redacted

    rows = [dict(zip(keys, r)) for r in conn.execute(sql, params)]
    for r in rows:
        r["last_error"] = redact_url(r["last_error"] or "")
    if as_json:
        print(json.dumps(rows))
        return 0
    print("ID\tSINK\tSTATE\tATTEMPTS\tRUN\tKIND\tSTATUS\tSTEP\tKEY\tLAST ERROR")
    for r in rows:
        print(f"{r['id']}\t{r['sink']}\t{r['state']}\t{r['attempts']}\t{r['run']}\t{r['kind']}\t"
              f"{r['status']}\t{r['step']}\t{r['key']}\t{r['last_error']}")
    return 0


def _replay(args, cfg) -> int:
    if not args.ids and not args.all:
        raise ConfigError("alerts replay: give delivery row ids (see `wtwind alerts dead`) or --all")
    if _daemon_running(cfg.state.path):
        if args.ids:
            raise ConfigError("alerts replay: wtwind is running; replay by id needs it stopped, "
                              "or use --all [--sink S] to replay through the running daemon")
        from wtwin.sinks import cli as sinks_cli

        url = f"http://{cfg.http.host}:{cfg.http.port}"
        argv = ["replay", "--url", url] + (["--sink", args.sink] if args.sink else [])
        return sinks_cli.main(argv, token=cfg.http.token())  # [http] token, if set
    from .outbox import SqliteOutbox

    async def go() -> int:
        box = SqliteOutbox(cfg.state.path)
        try:
            return await box.replay(args.sink, None if args.all else args.ids, now=time.time())
        finally:
            await box.aclose()

    try:
        n = asyncio.run(go())
    except ConfigError as exc:
        raise ConfigError(f"{exc}") from None
    print(f"replayed {n} dead row(s); they are sent when wtwind next starts")
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


def _iso(ts) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
