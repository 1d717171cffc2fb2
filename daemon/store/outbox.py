"""`SqliteOutbox`: the durable alert outbox, same contract as `wtwin.sinks.outbox`.

Rows live in the ``deliveries`` table (one per alert transition and sink, unique on
(sink, idempotency key)) next to the ``alerts`` journal. New rows are committed with
``synchronous=FULL`` before ``put_many`` returns, one transaction per batch, so a row
a sink has seen is on disk; outcomes (``record_many``) are committed at the store's own
sync mode, since losing one only repeats an attempt. Pending rows and the dead count are mirrored in memory (bounded by each
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

from wtwin.detect.alert import Alert
from wtwin.sinks.outbox import Item, Outcome, Row

from .db import open_db

_COLS = "d.id, d.sink, d.state, d.attempts, d.next_attempt_at, d.created_at, d.updated_at, d.last_error, a.body"
_SELECT = f"SELECT {_COLS} FROM deliveries d JOIN alerts a ON a.key = d.key"
_UPSERT_ALERT = """INSERT INTO alerts(key, run, kind, status, severity, step, body, created_at, routed)
    VALUES (?,?,?,?,?,?,?,?,1) ON CONFLICT(key) DO UPDATE SET routed = 1"""


def _insert(conn: sqlite3.Connection, alert: Alert, sink: str, now: float) -> tuple:
    """(True, id) for a new pending row; (False, id, state, attempts, ...) for an existing one."""
    key = alert.idempotency_key
    conn.execute(_UPSERT_ALERT, (key, alert.run, alert.kind, alert.status, alert.severity, alert.step,
                                 json.dumps(alert.to_dict()), now))
    cur = conn.execute("INSERT OR IGNORE INTO deliveries(key, sink, state, attempts, next_attempt_at, "
                       "created_at, updated_at) VALUES (?,?,'pending',0,?,?,?)", (key, sink, now, now, now))
    if cur.rowcount == 1:
        return (True, cur.lastrowid)
    return (False, *conn.execute("SELECT id, state, attempts, next_attempt_at, created_at, updated_at, "
                                 "last_error FROM deliveries WHERE sink = ? AND key = ?", (sink, key)).fetchone())


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

    async def _tx(self, fn: Callable[[sqlite3.Connection], Any], *, full: bool = True) -> Any:
        if self._execute is not None:
            return await self._execute(fn, full=full)
        return await asyncio.to_thread(self._run_own, fn, full)

    def _run_own(self, fn, full: bool = True):
        with self._tx_lock:
            conn = self._own
            conn.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
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
        return (await self.put_many([(alert, sinks)], now))[0]

    async def put_many(self, items: Sequence[Item], now: float) -> list[list[Row]]:
        """One FULL-sync transaction for the whole batch; rows are built from the alerts
        in hand (no read-back, no JSON decoding on the loop)."""
        batch = [(alert, list(dict.fromkeys(sinks))) for alert, sinks in items]

        def op(conn):
            return [[_insert(conn, alert, sink, now) for sink in names] for alert, names in batch]

        out = []
        for (alert, names), found in zip(batch, await self._tx(op)):
            out.append([self._put_row(alert, sink, rec, now) for sink, rec in zip(names, found)])
        return out

    def _put_row(self, alert: Alert, sink: str, rec: tuple, now: float) -> Row:
        created, rid, *rest = rec
        if created:
            row = Row(id=rid, sink=sink, alert=alert, next_attempt_at=now, created_at=now, updated_at=now)
            self._pending.setdefault(sink, OrderedDict())[rid] = row
            return row
        known = self._pending.get(sink, {}).get(rid)
        if known is not None:
            return known
        state, attempts, nxt, created_at, updated, err = rest
        return Row(id=rid, sink=sink, alert=alert, state=state, attempts=attempts, next_attempt_at=nxt,
                   created_at=created_at, updated_at=updated, last_error=err)

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
        await self.record_many([Outcome(row_id, state, attempts, next_attempt_at, error)], now)

    async def record_many(self, outcomes: Sequence[Outcome], now: float) -> None:
        """One transaction at the store's own sync mode (an outcome lost to a power cut
        costs a repeated attempt at most); pending rows come from memory, others are read."""
        if not outcomes:
            return
        known = {o.row_id: self._mirrored(o.row_id) for o in outcomes}  # as of now, not after the await
        unknown = [rid for rid, row in known.items() if row is None]
        params = [(o.state, o.attempts, o.next_attempt_at, o.error, now, o.row_id) for o in outcomes]

        def op(conn):
            found = {}
            for rid in unknown:
                rec = conn.execute(f"{_SELECT} WHERE d.id = ?", (rid,)).fetchone()
                if rec is None:  # change nothing (raising here would fail the writer's whole batch)
                    return rid
                found[rid] = rec
            conn.executemany("UPDATE deliveries SET state=?, attempts=?, next_attempt_at=?, last_error=?, "
                             "updated_at=? WHERE id=?", params)
            return found

        found = await self._tx(op, full=False)
        if not isinstance(found, dict):
            raise KeyError(found)
        for o in outcomes:
            old = known[o.row_id] or row_from(found[o.row_id])
            self._moved(old.state, replace(old, state=o.state, attempts=o.attempts,
                                           next_attempt_at=o.next_attempt_at, last_error=o.error,
                                           updated_at=now))

    def _mirrored(self, row_id: int) -> Row | None:
        for bucket in self._pending.values():
            row = bucket.get(row_id)
            if row is not None:
                return row
        return None

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

        return [row_from(rec) for rec in await self._tx(op, full=False)]  # a read: no fsync

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
