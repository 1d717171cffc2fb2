"""What the store holds about runs, for the pages: history past the run table's TTLs.

The run table keeps a run in memory until ``runs.ended_ttl_s`` after it ended (or
``idle_ttl_s`` after it went silent); the store keeps its last snapshot (status, step,
loss, config, its 64-point sparkline, its rewinds), its whole history as min/max buckets
(``envelope.py``, ``series_rows.py``) and every alert it raised, until ``wtwind state
forget`` or pruning (``retention.py``). These read-only queries open their own read-only
connection, so the web handlers run them in a worker thread, off the event loop. Plain
data out.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import numpy as np

from ..scalars import FIELDS as SCALAR_FIELDS
from ..scalars import KIND_PREFIX
from ..series import EVAL_FIELDS, TIMING_FIELDS, TRAIN_FIELDS
from . import envelope, series_rows
from .codec import decode_head
from .db import connect

MAX_LIMIT = 2000
MAX_MARKERS = 256


def _like(q: str) -> str:
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def list_runs(path: str, *, statuses: Iterable[str] = (), q: str = "", limit: int = 500,
              skip: Iterable[str] = ()) -> dict[str, Any]:
    """Stored runs, newest first, filtered by stored status and name substring;
    ``skip``: names the caller shows from memory. ``matching``: how many stored runs match
    in all (beyond ``limit``); ``fired``: the alerts each run raised, by severity."""
    skip = set(skip)
    where, args = ["1=1"], []
    statuses = [s for s in statuses if s]
    if statuses:
        where.append(f"status IN ({','.join('?' * len(statuses))})")
        args += statuses
    if q:
        where.append("run LIKE ? ESCAPE '\\'")
        args.append(_like(q))
    conn = connect(path, readonly=True)
    try:
        rows = conn.execute(f"SELECT run, status, preset, first_seen, last_seen, step, snapshot "
                            f"FROM runs WHERE {' AND '.join(where)} ORDER BY last_seen DESC LIMIT ?",
                            (*args, min(limit, MAX_LIMIT) + len(skip))).fetchall()
        names = conn.execute(f"SELECT run FROM runs WHERE {' AND '.join(where)}", args).fetchall()
        fired = _fired(conn)
    finally:
        conn.close()
    runs = [_summary(r, fired.get(r[0])) for r in rows if r[0] not in skip][:limit]
    return {"runs": runs, "matching": sum(1 for (n,) in names if n not in skip), "fired": fired}


def _fired(conn) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for run, sev, n in conn.execute("SELECT run, severity, COUNT(*) FROM alerts "
                                    "WHERE status = 'firing' GROUP BY run, severity"):
        out.setdefault(run, {})[sev] = n
    return out


def _snapshot(blob) -> dict[str, Any]:
    try:
        return decode_head(blob) if blob else {}
    except Exception:  # an unreadable snapshot: the row is listed without its details
        return {}


def _summary(row, fired) -> dict[str, Any]:
    run, status, preset, first, last, step, blob = row
    snap = _snapshot(blob)
    spark = (snap.get("spark") or {}).get("points") or []
    return {"run": run, "status": status, "preset": preset, "step": step, "first_seen": first,
            "last_seen": last, "loss": snap.get("loss"), "lr": snap.get("lr"),
            "spark": spark, "fired": fired or {}, "rewinds": list(snap.get("rewinds") or ())}


def run_record(path: str, name: str) -> dict[str, Any] | None:
    """One stored run with its config, last eval, sparkline and alert transitions."""
    conn = connect(path, readonly=True)
    try:
        row = conn.execute("SELECT run, status, preset, first_seen, last_seen, step, snapshot, config "
                           "FROM runs WHERE run = ?", (name,)).fetchone()
        if row is None:
            return None
        bodies = conn.execute("SELECT body FROM alerts WHERE run = ? ORDER BY created_at DESC, rowid "
                              "DESC LIMIT ?", (name, MAX_MARKERS)).fetchall()
        fired = _fired_one(conn, name)
        snap = _snapshot(row[6])
        train = _series(conn, name, "train", TRAIN_FIELDS)
        t0 = ((snap.get("history") or {}).get("train") or {}).get("t0")
        if train is not None:   # the times as stored: seconds since the run's first (envelope.py)
            train["time"] = [None if v is None or not isinstance(t0, (int, float)) else v + t0
                             for v in train["time"]]
        evals = _series(conn, name, "eval", EVAL_FIELDS)
        timing = _series(conn, name, "timing", TIMING_FIELDS)
        scalars = {kind[len(KIND_PREFIX):]: _series(conn, name, kind, SCALAR_FIELDS)
                   for (kind,) in conn.execute("SELECT DISTINCT kind FROM series WHERE run = ? AND "
                                               "kind >= ? AND kind < ? ORDER BY kind",
                                               (name, KIND_PREFIX, KIND_PREFIX[:-1] + ";"))}
    finally:
        conn.close()
    out = _summary(row[:7], fired)
    out["config"] = _json(row[7])
    out["series"], out["eval"], out["timing"] = train, evals, timing
    out["scalars"] = {k: v for k, v in scalars.items() if v is not None}   # daemon/scalars.py
    out["last_eval"] = snap.get("last_eval") or {}
    out["references"] = snap.get("references")   # names and group (docs/REFERENCES.md)
    out["markers"] = [m for m in (_marker(b[0]) for b in reversed(bodies)) if m]
    return out


def _series(conn, name: str, kind: str, fields: tuple[str, ...]) -> dict[str, list] | None:
    """The run's stored envelope as page columns (None: none stored, as for a run stored
    before history was kept: the page falls back to its sparkline)."""
    blk = series_rows.read(conn, name, kind)
    if not len(blk):
        return None
    cols = envelope.columns(envelope.widen(blk, len(fields) - 1), fields[1:])
    return {f: cols[f].tolist() if f == "step" else _short(cols[f]) for f in fields}


def _short(col: np.ndarray) -> list:
    """JSON-ready: 7 significant digits (what float32 holds; short in JSON: the page of a
    long run is a few thousand rows of 9 fields), None where missing."""
    out = col.copy()
    fin = np.isfinite(col) & (col != 0)
    x = col[fin]
    dec = 6 - np.floor(np.log10(np.abs(x)))
    scale = np.power(10.0, np.abs(dec))
    out[fin] = np.where(dec >= 0, np.round(x * scale) / scale, np.round(x / scale) * scale)
    return np.where(np.isfinite(out), out, None).tolist()


def _fired_one(conn, name: str) -> dict[str, int]:
    return dict(conn.execute("SELECT severity, COUNT(*) FROM alerts WHERE run = ? AND "
                             "status = 'firing' GROUP BY severity", (name,)).fetchall())


def _json(text: str) -> dict:
    try:
        d = json.loads(text or "{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _marker(body: str) -> dict[str, Any] | None:
    a = _json(body)
    if not a.get("kind"):
        return None
    return {"step": a.get("step"), "kind": a["kind"], "severity": a.get("severity"),
            "status": a.get("status"), "message": str(a.get("message") or ""),
            "details": str(a.get("details") or "")}
