"""`Store`: the daemon's SQLite database, and nothing else: no event-loop logic.

It opens the file (lock, checks, migrations: ``db.py``), owns the one writer thread
(``writer.py``) and the durable outbox (``deliveries.py``: the delivery rows). ``open``
reads the outbox's pending rows on the loop, before the writer thread starts; from then on every statement
of the store, reads included, runs on that thread, through its one connection (the run
pages read the file through read-only connections of their own, on executor threads:
``history.py``). Who decides what to write and when is elsewhere: run snapshots in
``daemon/snapshots.py``, the alert journal in ``daemon/alert_path.py``, bringing runs
back in ``daemon/restores.py``, alert delivery in ``sinks/delivery.py``.

Reads go through the writer's queue too, so a read sees every write submitted before
it (a run evicted from memory and wanted again a moment later reads its last snapshot,
not the one before), and the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any, Callable

import structlog

from .config import StateConfig
from .db import open_db
from .deliveries import SqliteOutbox
from .run_rows import write_runs
from .retention import Pruned, prune
from .writer import Writer

log = structlog.get_logger("wtwind.store")

Op = Callable[[sqlite3.Connection], Any]
Done = Callable[[Any, BaseException | None], None]

_LIVE = ("SELECT run, config, snapshot FROM runs WHERE snapshot IS NOT NULL AND "
         "((status = 'running' AND last_seen > ?) OR last_seen > ?) ORDER BY last_seen DESC")


PRUNE_SOON_S = 0.1  # the next pass, when the last was capped or runs just left memory


class Store:
    def __init__(self, cfg: StateConfig, *, ended_after_s: float = 900.0,
                 idle_after_s: float = 24 * 3600.0, live: Callable[[], frozenset[str]] | None = None) -> None:
        """``ended_after_s``/``idle_after_s``: the run table's TTLs; ``live()``: the names
        of the runs in memory now. An ended run is pruned once it has left memory, any
        run past its TTL (``retention.py``)."""
        self.cfg = cfg
        self.live = live or frozenset
        self.ended_after_s, self.idle_after_s = ended_after_s, idle_after_s
        self.pruned = {"age": 0, "count": 0, "size": 0}   # runs deleted, by reason
        self.pruned_bytes = 0
        self.used_bytes = 0
        self._prune_timer: asyncio.TimerHandle | None = None
        self._pruning = False  # a pass is on the writer's queue
        self.path = cfg.path
        # DaemonConfig() built by hand has no path: memory only (config.load() always sets one)
        self.wanted = cfg.enabled and bool(cfg.path)
        self.writer: Writer | None = None
        self.runs: set[str] = set()  # names in the runs table (loaded at open, grown by writes)
        self._conn: sqlite3.Connection | None = None
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
        self.outbox.attach(self._conn)  # on the loop, before the writer thread owns the connection
        self.writer = Writer(self._conn, loop, synchronous=self.cfg.synchronous)
        log.info("store_opened", path=self.path)
        self._prune_timer = loop.call_later(min(5.0, self.cfg.prune_interval_s), self.prune)

    def prune(self) -> None:
        """One pruning pass on the writer thread (no fsync of its own: the configured
        mode); the next in ``prune_interval_s``, or in 0.5 s when this one was capped."""
        cfg, live = self.cfg, self.live()  # taken on the loop, the one owner of the table

        def op(conn):
            return prune(conn, time.time(), retention_s=cfg.retention_days * 86400, max_runs=cfg.max_runs,
                         max_bytes=cfg.max_bytes, ended_after_s=self.ended_after_s,
                         idle_after_s=self.idle_after_s, live=live)

        if self.writer is not None and not self._pruning:
            self._pruning = True
            self.writer.submit(op, done=self._pruned)

    def prune_soon(self) -> None:
        """Runs left memory (the server's tick): with more runs stored than ``max_runs``, a
        pass within ``PRUNE_SOON_S`` instead of at the next ``prune_interval_s``, so the
        store keeps up with churn."""
        if self.writer is None or self._pruning or len(self.runs) <= self.cfg.max_runs:
            return
        if self._prune_timer is not None:
            self._prune_timer.cancel()
        self._prune_timer = self.writer.loop.call_later(PRUNE_SOON_S, self.prune)

    def _pruned(self, res: Pruned | None, err: BaseException | None) -> None:
        self._pruning = False
        loop = self.writer.loop
        again = PRUNE_SOON_S if res is not None and res.capped else self.cfg.prune_interval_s
        self._prune_timer = loop.call_later(again, self.prune) if not loop.is_closed() else None
        if err is not None or res is None:
            return                      # the writer logged it; the next pass tries again
        self.used_bytes = res.used_bytes
        if not res.runs:
            return
        self.runs.difference_update(res.runs)
        for k in self.pruned:
            self.pruned[k] += getattr(res, k)
        self.pruned_bytes += res.bytes
        log.info("store_pruned", runs=len(res.runs), by_age=res.age, past_max_runs=res.count,
                 past_max_bytes=res.size, bytes=res.bytes, used_bytes=res.used_bytes,
                 oldest=res.runs[0], more=res.capped, elapsed_s=round(res.elapsed_s, 3))

    async def close(self) -> None:
        """Finish what is queued and stop the writer thread (after the last snapshots)."""
        if self._prune_timer is not None:
            self._prune_timer.cancel()
        if self.writer is not None:
            done = await asyncio.get_running_loop().run_in_executor(None, self.writer.close)
            if not done:
                log.error("store_close_timeout", path=self.path)
        if self._conn is not None:
            self._conn.close()
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

    def rename_run(self, name: str, to: str) -> None:
        """The run ``name``'s rows (its snapshot, history and alerts) become ``to``'s: an
        ended run whose name is used again (daemon/incarnations.py). Queued before any
        later snapshot of either run, so a write of ``to`` never meets ``name``'s row."""
        self.runs.add(to)

        def op(conn):
            for table in ("runs", "series", "alerts"):
                conn.execute(f"UPDATE {table} SET run = ? WHERE run = ?", (to, name))

        self.writer.submit(op, full=True)

    def commit_alert(self, row: tuple | None, write: Op, done: Done) -> None:
        """One ``synchronous=FULL`` transaction: the run's snapshot row (``codec.encode``, or
        None) and ``write`` (the alert row and its outbox rows: ``SqliteOutbox.stage``);
        ``done(({run: error}, write's result), err)`` on the loop after the commit."""
        if row is not None:
            self.runs.add(row[0])

        def op(conn):
            return (write_runs(conn, [row]) if row is not None else {}), write(conn)

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
