"""`Store`: the daemon's SQLite database, and nothing else: no event-loop logic.

It opens the file (lock, checks, migrations: ``db.py``), owns the one writer thread
(``writer.py``) through which every statement runs, reads included, and the durable
outbox (``outbox.py``) whose transactions go through that same thread. Who decides
what to write and when is elsewhere: run snapshots in ``daemon/snapshots.py``, bringing
runs back in ``daemon/restores.py``, alert delivery in ``sinks/delivery.py``.

Reads go through the writer's queue too, so a read sees every write submitted before
it (a run evicted from memory and wanted again a moment later reads its last snapshot,
not the one before), and the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from typing import Any, Callable

import structlog

from .config import StateConfig
from .db import connect, open_db
from .outbox import SqliteOutbox
from .quarantine import write_runs
from .writer import Writer

log = structlog.get_logger("wtwind.store")

Op = Callable[[sqlite3.Connection], Any]
Done = Callable[[Any, BaseException | None], None]

_INSERT_ALERT = """INSERT OR IGNORE INTO alerts(key, run, kind, status, severity, step, body,
    created_at) VALUES (?,?,?,?,?,?,?,?)"""
_LIVE = ("SELECT run, config, snapshot FROM runs WHERE snapshot IS NOT NULL AND "
         "((status = 'running' AND last_seen > ?) OR last_seen > ?) ORDER BY last_seen DESC")


class Store:
    def __init__(self, cfg: StateConfig) -> None:
        self.cfg = cfg
        self.path = cfg.path
        # DaemonConfig() built by hand has no path: memory only (config.load() always sets one)
        self.wanted = cfg.enabled and bool(cfg.path)
        self.writer: Writer | None = None
        self.runs: set[str] = set()  # names in the runs table (loaded at open, grown by writes)
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._lock = None
        # the durable outbox; usable once open() has run (the server starts delivery after)
        self.outbox = SqliteOutbox(execute=self.execute) if self.wanted else None

    @property
    def durable(self) -> bool:
        return self.writer is not None

    @property
    def failing(self) -> bool:
        """Persistence is failing (not one quarantined run): /readyz turns red."""
        return self.writer is not None and self.writer.failing

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Lock, check and migrate the database (ConfigError naming the file on failure)."""
        if not self.wanted:
            log.info("store_disabled", hint="run state is in memory only; [state] enabled/path")
            return
        self._conn, self._lock = open_db(self.path, busy_timeout_s=self.cfg.busy_timeout_s)
        self._reader = connect(self.path, busy_timeout_s=self.cfg.busy_timeout_s)
        self.writer = Writer(self._conn, loop, synchronous=self.cfg.synchronous)
        self.outbox.attach(self._reader)
        log.info("store_opened", path=self.path)

    async def close(self) -> None:
        """Finish what is queued and stop the writer thread (after the last snapshots)."""
        if self.writer is not None:
            done = await asyncio.get_running_loop().run_in_executor(None, self.writer.close)
            if not done:
                log.error("store_close_timeout", path=self.path)
        for conn in (self._reader, self._conn):
            if conn is not None:
                conn.close()
        if self._lock is not None:
            self._lock.release()

    # ---- operations, all on the writer thread ----------------------------------------------
    def execute(self, fn: Op, *, full: bool = True) -> asyncio.Future:
        """``fn(conn)`` in a transaction; a future for its committed result (the outbox)."""
        return self.writer.call(fn, full=full)

    def submit(self, fn: Op, *, full: bool = False, done: Done | None = None) -> None:
        self.writer.submit(fn, full=full, done=done)

    def write_runs(self, rows: list[tuple], done: Done) -> None:
        """Upsert run rows (``codec.encode``); ``done({run: error}, err)`` after commit."""
        self.runs.update(row[0] for row in rows)
        self.writer.submit(lambda conn: write_runs(conn, rows), done=done)

    def commit_alert(self, alert, row: tuple | None, staged, done: Done) -> None:
        """The alert, its run's snapshot row and its outbox rows (``staged.op``, routed by
        delivery) in one ``synchronous=FULL`` commit; ``done(({run: error}, rows), err)``."""
        params = (alert.idempotency_key, alert.run, alert.kind, alert.status, alert.severity,
                  alert.step, json.dumps(alert.to_dict()), time.time())
        if row is not None:
            self.runs.add(row[0])

        def op(conn):
            conn.execute(_INSERT_ALERT, params)
            failed = write_runs(conn, [row]) if row is not None else {}
            return failed, (staged.op(conn) if staged is not None else None)

        self.writer.submit(op, full=True, done=done)

    async def live_runs(self, now: float, *, idle_ttl_s: float, ended_ttl_s: float) -> list[tuple]:
        """(run, config, snapshot) of every run still live by the TTLs, newest first; and
        ``runs`` learns every stored name."""
        def op(conn):
            names = [n for (n,) in conn.execute("SELECT run FROM runs")]
            return names, conn.execute(_LIVE, (now - idle_ttl_s, now - ended_ttl_s)).fetchall()

        if self.writer is None:
            return []
        names, rows = await self.execute(op, full=False)
        self.runs.update(names)
        return rows

    def read_run(self, name: str, done: Done) -> None:
        """``done((config, snapshot) or None, err)`` on the loop, after earlier writes."""
        def op(conn):
            return conn.execute("SELECT config, snapshot FROM runs WHERE run = ?", (name,)).fetchone()

        self.writer.submit(op, done=done, read=True)
