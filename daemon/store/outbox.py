"""`SqliteOutbox`: the durable alert outbox, same contract as `wtwin.sinks.outbox`.

Rows live in the ``deliveries`` table (one per alert transition and sink, unique on
(sink, idempotency key)) next to the ``alerts`` journal. Every write is committed
with ``synchronous=FULL`` before the coroutine returns, so a row a sink has seen is
on disk. Pending rows and the dead count are mirrored in memory (bounded by each
sink's queue) so ``due``/``next_due``/``counts`` cost no I/O; ``dead`` reads the disk.

In the daemon the writes go through the store's single writer thread (ordered with
the alert journal and the run snapshots); standalone (``SqliteOutbox(path)``, used
by the CLI and the conformance tests) it opens and locks the file itself.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from wtwin.sinks.alert import Alert
from wtwin.sinks.outbox import STATES, Row

from .db import open_db

_COLS = "d.id, d.sink, d.state, d.attempts, d.next_attempt_at, d.created_at, d.updated_at, d.last_error, a.body"
_SELECT = f"SELECT {_COLS} FROM deliveries d JOIN alerts a ON a.key = d.key"
_UPSERT_ALERT = """INSERT INTO alerts(key, run, kind, status, severity, step, body, created_at, routed)
    VALUES (?,?,?,?,?,?,?,?,1) ON CONFLICT(key) DO UPDATE SET routed = 1"""


def row_from(rec: tuple) -> Row:
    rid, sink, state, attempts, nxt, created, updated, err, body = rec
    return Row(id=rid, sink=sink, alert=Alert.from_dict(json.loads(body)), state=state,
               attempts=attempts, next_attempt_at=nxt, created_at=created, updated_at=updated,
               last_error=err)


class SqliteOutbox:
    def __init__(self, path: str | Path | None = None, *,
                 execute: Callable[..., Any] | None = None,
                 conn: sqlite3.Connection | None = None) -> None:
        """Standalone with ``path``; in the daemon with the store's ``execute`` and reader."""
        self._lock = None
        self._tx_lock = threading.Lock()
        if execute is None:
            conn, self._lock = open_db(str(path))
            self._own = conn
        else:
            self._own = None
        self._execute = execute
        self._reader = conn
        self._pending: dict[str, OrderedDict[int, Row]] = {}
        self._dead_n: dict[str, int] = {}
        if conn is not None:
            self.attach(conn)

    # ---- plumbing ----------------------------------------------------------------------
    def attach(self, conn: sqlite3.Connection) -> None:
        """Read pending rows and dead counts from ``conn`` (once, at startup)."""
        self._reader = conn
        for rec in self._reader.execute(f"{_SELECT} WHERE d.state = 'pending' ORDER BY d.id"):
            row = row_from(rec)
            self._pending.setdefault(row.sink, OrderedDict())[row.id] = row
        for sink, n in self._reader.execute(
                "SELECT sink, count(*) FROM deliveries WHERE state = 'dead' GROUP BY sink"):
            self._dead_n[sink] = n

    async def _tx(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._execute is not None:
            return await self._execute(fn, full=True)
        return await asyncio.to_thread(self._run_own, fn)

    def _run_own(self, fn):
        with self._tx_lock:
            conn = self._own
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    # ---- contract ------------------------------------------------------------------------
    async def put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]:
        key = alert.idempotency_key
        body = json.dumps(alert.to_dict())
        names = list(dict.fromkeys(sinks))

        def op(conn):
            conn.execute(_UPSERT_ALERT, (key, alert.run, alert.kind, alert.status, alert.severity,
                                         alert.step, body, now))
            out = []
            for sink in names:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO deliveries(key, sink, state, attempts, next_attempt_at, "
                    "created_at, updated_at) VALUES (?,?,'pending',0,?,?,?)", (key, sink, now, now, now))
                rec = conn.execute(f"{_SELECT} WHERE d.sink = ? AND d.key = ?", (sink, key)).fetchone()
                out.append((cur.rowcount == 1, rec))
            return out

        rows = []
        for created, rec in await self._tx(op):
            row = row_from(rec)
            if created:
                self._pending.setdefault(row.sink, OrderedDict())[row.id] = row
            elif row.state == "pending":
                row = self._pending.get(row.sink, {}).get(row.id, row)
            rows.append(row)
        return rows

    async def due(self, sink: str, now: float, limit: int) -> list[Row]:
        out = []
        for row in self._pending.get(sink, {}).values():
            if row.next_attempt_at <= now:
                out.append(row)
                if len(out) >= limit:
                    break
        return out

    async def next_due(self, sink: str) -> float | None:
        pending = self._pending.get(sink)
        return min((r.next_attempt_at for r in pending.values()), default=None) if pending else None

    async def record(self, row_id: int, *, state: str, attempts: int, next_attempt_at: float,
                     error: str, now: float) -> None:
        if state not in STATES:
            raise ValueError(f"state must be one of {STATES}, got {state!r}")

        def op(conn):
            old = conn.execute("SELECT state FROM deliveries WHERE id = ?", (row_id,)).fetchone()
            if old is None:
                raise KeyError(row_id)
            conn.execute("UPDATE deliveries SET state=?, attempts=?, next_attempt_at=?, last_error=?, "
                         "updated_at=? WHERE id=?", (state, attempts, next_attempt_at, error, now, row_id))
            return old[0], conn.execute(f"{_SELECT} WHERE d.id = ?", (row_id,)).fetchone()

        old_state, rec = await self._tx(op)
        self._moved(old_state, row_from(rec))

    def _moved(self, old_state: str, row: Row) -> None:
        """Mirror one row's new state in memory (FIFO position kept for pending)."""
        sink = row.sink
        bucket = self._pending.setdefault(sink, OrderedDict())
        if old_state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) - 1
        if row.state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) + 1
        if row.state != "pending":
            bucket.pop(row.id, None)
            return
        known = row.id in bucket
        bucket[row.id] = row
        if not known and len(bucket) > 1 and next(reversed(bucket)) == row.id:
            self._pending[sink] = OrderedDict(sorted(bucket.items()))

    async def dead(self, sink: str | None = None, limit: int = 1000) -> list[Row]:
        def op(conn):
            where, args = ("AND d.sink = ?", (sink,)) if sink else ("", ())
            return conn.execute(f"{_SELECT} WHERE d.state = 'dead' {where} ORDER BY d.id LIMIT ?",
                                (*args, limit)).fetchall()

        return [row_from(rec) for rec in await self._tx(op)]

    async def replay(self, sink: str | None = None, ids: Iterable[int] | None = None, *,
                     now: float) -> int:
        wanted = None if ids is None else [int(i) for i in ids]

        def op(conn):
            where, args = "d.state = 'dead'", []
            if sink:
                where, args = where + " AND d.sink = ?", [sink]
            recs = conn.execute(f"{_SELECT} WHERE {where} ORDER BY d.id", args).fetchall()
            recs = [r for r in recs if wanted is None or r[0] in wanted]
            conn.executemany("UPDATE deliveries SET state='pending', attempts=0, next_attempt_at=?, "
                             "last_error='', updated_at=? WHERE id=?", [(now, now, r[0]) for r in recs])
            return recs

        recs = await self._tx(op)
        for rec in recs:
            self._moved("dead", replace(row_from(rec), state="pending", attempts=0,
                                        next_attempt_at=now, last_error="", updated_at=now))
        return len(recs)

    def counts(self) -> dict[tuple[str, str], int]:
        out = {(sink, "pending"): len(rows) for sink, rows in self._pending.items() if rows}
        out.update({(sink, "dead"): n for sink, n in self._dead_n.items() if n})
        return out

    def unrouted(self) -> list[Alert]:
        """Alerts journaled by the store but never offered to the sinks (a crash between)."""
        recs = self._reader.execute("SELECT body FROM alerts WHERE routed = 0 ORDER BY created_at")
        return [Alert.from_dict(json.loads(body)) for (body,) in recs]

    async def aclose(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
