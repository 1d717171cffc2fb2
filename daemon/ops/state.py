"""``wtwind state``: the runs in the store (ls, show RUN, forget RUN).

Reading (``state ls|show``) works while the daemon runs (SQLite WAL readers never
block it). Writing (``state forget``) takes the database's owner lock, so it refuses
while a daemon holds it.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

from ..errors import ConfigError
from ..store import codec
from ..store.db import open_db, open_readonly


def add_parser(sub) -> None:
    st = sub.add_parser("state", help="runs in the store: ls | show RUN | forget RUN")
    st.add_argument("action", choices=("ls", "show", "forget"))
    st.add_argument("run", nargs="?", help="run id (show, forget)")
    st.add_argument("--json", action="store_true", help="machine-readable output")


def run(args, cfg) -> int:
    return _state(args, cfg.state.path)


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
        conn.execute("BEGIN")
        n = conn.execute("DELETE FROM runs WHERE run = ?", (run,)).rowcount
        conn.execute("DELETE FROM series WHERE run = ?", (run,))
        conn.execute("COMMIT")
    finally:
        conn.close()
        lock.release()
    if not n:
        print(f"wtwind state: no run {run!r} in {path}", file=sys.stderr)
        return 1
    print(f"forgot run {run!r} and its series (its alert history is kept)")
    return 0


def _owned(path: str):
    try:
        return open_db(path)
    except ConfigError as exc:
        if "locked" in str(exc):
            raise ConfigError(f"{exc}; stop wtwind first (reading commands work while it runs)") from None
        raise


def _iso(ts) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
