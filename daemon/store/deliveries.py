"""`SqliteOutbox`: the store's delivery rows, the durable alert outbox (the contract of
`wtwin.sinks.delivery_queue`).

Rows live in the ``deliveries`` table (one per alert transition and sink, unique on
(sink, idempotency key)) next to the ``alerts`` journal, which holds each transition
once and whose body the rows join. This module is the only one that writes either
table's new rows: ``stage``'s operation writes the alert row (always, even when no
sink gets it) and its delivery rows. In the daemon the alert journal
(``daemon/alert_path.py``) runs that operation in the store's ``synchronous=FULL``
transaction that also holds the run's snapshot, one commit per alert (or per batch of
them); standalone, ``commit``/``put_many`` run it in a FULL transaction of their own.
Outcomes (``record_many``) are committed at the store's own sync mode, since losing
one only repeats an attempt. Pending rows and dead counts are mirrored in memory
(``PendingIndex``) so ``due``/``next_due``/``counts`` cost no I/O; ``dead`` reads the
disk.

In the daemon the writes go through the store's single writer thread (ordered with
the run snapshots); standalone (``SqliteOutbox(path)``, used by the CLI and the
conformance tests) it opens and locks the file itself.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from wtwin.detect.alert import Alert
from wtwin.sinks.delivery_queue import QUEUE_FULL, Item, Outcome, PendingIndex, Row, Staged, plans_for
from wtwin.sinks.routing import Plan, settle

from .db import open_db

_COLS = "d.id, d.sink, d.state, d.attempts, d.next_attempt_at, d.created_at, d.updated_at, d.last_error, a.body"
_SELECT = f"SELECT {_COLS} FROM deliveries d JOIN alerts a ON a.key = d.key"
_INSERT_ALERT = """INSERT OR IGNORE INTO alerts(key, run, kind, status, severity, step, body, created_at)
    VALUES (?,?,?,?,?,?,?,?)"""


def _write(conn: sqlite3.Connection, plan: Plan, now: float, full=frozenset(),
           created: float | None = None) -> tuple[list[int], list[tuple]]:
    """One plan inside the caller's transaction: the alert row (once, dated ``created``:
    when it was routed, ``now`` by default), then the held rows
    it cancels, and per sink (sink, True, id, due, state) for a new row or (sink, False,
    id, state, attempts, ...) for one already there. New rows for a sink in ``full``
    (its queue) are dead."""
    alert, key = plan.alert, plan.alert.idempotency_key
    conn.execute(_INSERT_ALERT, (key, alert.run, alert.kind, alert.status, alert.severity, alert.step,
                                 json.dumps(alert.to_dict()), now if created is None else created))
    found = {}
    for sink in plan.due:
        for fired in plan.episode:
            rec = conn.execute("SELECT id, state, attempts, next_attempt_at FROM deliveries "
                               "WHERE sink = ? AND key = ?", (sink, fired)).fetchone()
            if rec is not None:
                found.setdefault(sink, []).append(rec)
    cancel, due = settle(plan, found, now)
    conn.executemany("DELETE FROM deliveries WHERE id = ?", [(i,) for i in cancel])
    return cancel, [_insert(conn, key, sink, at, now, "dead" if sink in full else "pending")
                    for sink, at in due.items()]


def _insert(conn: sqlite3.Connection, key: str, sink: str, at: float, now: float, state: str) -> tuple:
    error = QUEUE_FULL if state == "dead" else ""
    cur = conn.execute("INSERT OR IGNORE INTO deliveries(key, sink, state, attempts, next_attempt_at, "
                       "created_at, updated_at, last_error) VALUES (?,?,?,0,?,?,?,?)",
                       (key, sink, state, at, now, now, error))
    if cur.rowcount == 1:
        return (sink, True, cur.lastrowid, at, state)
    return (sink, False, *conn.execute("SELECT id, state, attempts, next_attempt_at, created_at, updated_at, "
                                       "last_error FROM deliveries WHERE sink = ? AND key = ?",
                                       (sink, key)).fetchone())


def row_from(rec: tuple) -> Row:
    rid, sink, state, attempts, nxt, created, updated, err, body = rec
    return Row(id=rid, sink=sink, alert=Alert.from_dict(json.loads(body)), state=state,
               attempts=attempts, next_attempt_at=nxt, created_at=created, updated_at=updated,
               last_error=err)


class SqliteOutbox:
    def __init__(self, path: str | Path | None = None, *,
                 execute: Callable[..., Any] | None = None,
                 conn: sqlite3.Connection | None = None) -> None:
        """Standalone with ``path``; in the daemon with the store's ``execute`` (and ``attach``
        once the file is open)."""
        self._lock = None
        self._tx_lock = threading.Lock()
        if execute is None:
            conn, self._lock = open_db(str(path))
            self._own = conn
        else:
            self._own = None
        self._execute = execute
        self.index = PendingIndex()
        if conn is not None:
            self.attach(conn)

    # ---- plumbing ----------------------------------------------------------------------
    def attach(self, conn: sqlite3.Connection) -> None:
        """Read pending rows and dead counts from ``conn`` (once, at startup)."""
        for rec in conn.execute(f"{_SELECT} WHERE d.state = 'pending' ORDER BY d.id"):
            self.index.moved(None, row_from(rec))
        for sink, n in conn.execute(
                "SELECT sink, count(*) FROM deliveries WHERE state = 'dead' GROUP BY sink"):
            self.index.dead_counted(sink, n)

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
    def stage(self, plans: Sequence[Plan], now: float, *, full: frozenset[str] = frozenset()) -> Staged:
        """Routed alerts as one operation for the caller's FULL transaction; the rows are
        mirrored (due, counted) by ``rows`` once it has committed."""
        plans = list(plans)
        staged_at = time.monotonic()

        def op(conn):
            # judged when the transaction runs, not when it was staged: a worker may have
            # taken a firing whose hold ended meanwhile, so that row is no longer held
            at = now + (time.monotonic() - staged_at)
            return [_write(conn, plan, at, full, created=now) for plan in plans]

        return Staged(op, lambda result: [self._mirror(plan, out, now) for plan, out in zip(plans, result)])

    def commit(self, staged: Staged) -> asyncio.Future:
        """A staged write in a FULL transaction of its own; a future of its rows."""
        async def go():
            return staged.rows(await self._tx(staged.op))

        return asyncio.ensure_future(go())

    def _mirror(self, plan: Plan, out: tuple, now: float) -> list[Row]:
        cancel, recs = out
        for row_id in cancel:
            self.index.drop(row_id)
        rows = []
        for sink, created, rid, *rest in recs:
            if created:
                at, state = rest
                row = Row(id=rid, sink=sink, alert=plan.alert, next_attempt_at=at, created_at=now,
                          updated_at=now, state=state, last_error=QUEUE_FULL if state == "dead" else "")
                self.index.moved(None, row)
            else:
                row = self.index.get(rid)
                if row is None:
                    state, attempts, nxt, created_at, updated, err = rest
                    row = Row(id=rid, sink=sink, alert=plan.alert, state=state, attempts=attempts,
                              next_attempt_at=nxt, created_at=created_at, updated_at=updated, last_error=err)
            rows.append(row)
        return rows

    async def put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]:
        return (await self.put_many([(alert, sinks)], now))[0]

    async def put_many(self, items: Sequence[Item], now: float) -> list[list[Row]]:
        """One FULL-sync transaction for the whole batch; rows are built from the alerts
        in hand (no read-back, no JSON decoding on the loop)."""
        plans = plans_for(items, now)
        out = await self._tx(lambda conn: [_write(conn, plan, now) for plan in plans])
        return [self._mirror(plan, found, now) for plan, found in zip(plans, out)]

    async def due(self, sink: str, now: float, limit: int) -> list[Row]:
        return self.index.due(sink, now, limit)

    async def next_due(self, sink: str) -> float | None:
        return self.index.next_due(sink)

    async def record(self, row_id: int, *, state: str, attempts: int, next_attempt_at: float,
                     error: str, now: float) -> None:
        await self.record_many([Outcome(row_id, state, attempts, next_attempt_at, error)], now)

    async def record_many(self, outcomes: Sequence[Outcome], now: float) -> None:
        """One transaction at the store's own sync mode (an outcome lost to a power cut
        costs a repeated attempt at most); pending rows come from memory, others are read."""
        if not outcomes:
            return
        known = {o.row_id: self.index.get(o.row_id) for o in outcomes}  # as of now, not after the await
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
            self.index.moved(old.state, replace(old, state=o.state, attempts=o.attempts,
                                                 next_attempt_at=o.next_attempt_at, last_error=o.error,
                                                 updated_at=now))

    async def dead(self, sink: str | None = None, limit: int = 1000) -> list[Row]:
        def op(conn):
            where, args = ("AND d.sink = ?", (sink,)) if sink else ("", ())
            return conn.execute(f"{_SELECT} WHERE d.state = 'dead' {where} ORDER BY d.id LIMIT ?",
                                (*args, limit)).fetchall()

        return [row_from(rec) for rec in await self._tx(op, full=False)]  # a read: no fsync

    async def redeliver(self, sink: str | None = None, ids: Iterable[int] | None = None, *,
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
            self.index.moved("dead", replace(row_from(rec), state="pending", attempts=0,
                                              next_attempt_at=now, last_error="", updated_at=now))
        return len(recs)

    def counts(self) -> dict[tuple[str, str], int]:
        return self.index.counts()

    async def aclose(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
