"""The writer thread: every database write, batched into few transactions, off the loop.

The event loop submits operations (``fn(conn) -> result``) with ``submit``; the
thread takes everything queued, runs it in one transaction and commits, with
``synchronous=FULL`` when any operation in the batch asks for it (alerts and
outbox rows) and the configured mode otherwise. Results come back as asyncio
futures resolved on the loop, or as plain callbacks run on the loop
(``poll_completed``). A failed batch is rolled back, nothing half-written, and its
operations are run again in halves (and halves of those): one poisoned operation (a
value SQLite cannot store) fails alone, and every other run's snapshot and every alert
in the batch still commit (one bad step must not stop persistence for every run).
Operations must therefore be safe to run again after a rollback.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any, Callable

import structlog

log = structlog.get_logger("wtwind.store")

Op = Callable[[sqlite3.Connection], Any]
MAX_BATCH_OPS = 5000


@dataclass
class _Item:
    fn: Op
    full: bool
    done: Callable[[Any, BaseException | None], None] | None
    read: bool = False


class Writer:
    def __init__(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop, *,
                 synchronous: str = "normal") -> None:
        self.conn = conn
        self.loop = loop
        self.base_sync = synchronous.upper()
        self.commits = 0
        self._write_commits = 0    # commits with a write in them: what "failing" is judged on
        self.full_commits = 0      # of which synchronous=FULL (an fsync each): alerts, outbox rows
        self.errors = 0            # transactions rolled back
        self.failed_ops = 0        # operations that failed even on their own
        self.consecutive_errors = 0  # batches with writes in a row that committed none: /readyz
        self.ops = 0
        self._q: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._completed: queue.SimpleQueue = queue.SimpleQueue()  # (done, result, error)
        self._sync = ""
        self._polling = False  # poll_completed is running (on the loop thread)
        self._thread = threading.Thread(target=self._main, name="wtwind-store-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Op, *, full: bool = False,
               done: Callable[[Any, BaseException | None], None] | None = None,
               read: bool = False) -> None:
        """Queue ``fn``; ``done(result, error)`` runs on the loop after the commit.
        ``read``: ``fn`` only reads (run restores): its success says nothing of the disk."""
        self._q.put(_Item(fn, full, done, read))

    def call(self, fn: Op, *, full: bool = False) -> asyncio.Future:
        """Queue ``fn`` and return a future for its committed result."""
        fut = self.loop.create_future()

        def done(result, error):
            if fut.done():
                return
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)

        self.submit(fn, full=full, done=done)
        return fut

    def close(self, timeout: float = 10.0) -> bool:
        """Finish what is queued, stop the thread; True if it stopped in time."""
        self._q.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- thread ------------------------------------------------------------------------
    def _main(self) -> None:
        stop = False
        while not stop:
            item = self._q.get()
            batch = []
            while item is not None:
                batch.append(item)
                if len(batch) >= MAX_BATCH_OPS:
                    break
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
            stop = item is None
            if batch:
                before = self._write_commits
                self._run(batch)
                if all(i.read for i in batch):
                    continue
                # a poisoned operation alone is not "persistence failing"; no write committed is
                self.consecutive_errors = 0 if self._write_commits > before else self.consecutive_errors + 1

    def _set_sync(self, mode: str) -> None:
        if mode != self._sync:
            self.conn.execute(f"PRAGMA synchronous={mode}")
            self._sync = mode

    def _run(self, batch: list[_Item]) -> None:
        results, error = self._transaction(batch)
        if error is not None and len(batch) > 1:  # find the poisoned operation(s): halve, in order
            mid = len(batch) // 2
            self._run(batch[:mid])
            self._run(batch[mid:])
            return
        if error is not None:
            self.failed_ops += 1
            log.error("store_write_failed", error=f"{type(error).__name__}: {error}"[:300],
                      hint="state not persisted; emitters keep unacknowledged events")
        for i, item in enumerate(batch):
            if item.done is not None:
                res = results[i] if error is None else None
                self._deliver(item.done, res, error)

    def _transaction(self, batch: list[_Item]) -> tuple[list[Any], BaseException | None]:
        results: list[Any] = []
        try:
            full = any(i.full for i in batch)
            self._set_sync("FULL" if full else self.base_sync)
            self.conn.execute("BEGIN")
            for item in batch:
                results.append(item.fn(self.conn))
            self.conn.execute("COMMIT")
        except Exception as exc:  # task boundary: roll back and count; the caller logs
            self.errors += 1
            try:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            return results, exc
        self.commits += 1
        self._write_commits += not all(i.read for i in batch)
        self.full_commits += full
        self.ops += len(batch)
        return results, None

    def _deliver(self, done, result, error) -> None:
        self._completed.put((done, result, error))
        try:
            self.loop.call_soon_threadsafe(self.poll_completed)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass

    @property
    def failing(self) -> bool:
        """Three batches with writes in a row committed none: the disk, not one bad value."""
        return self.consecutive_errors >= 3

    def poll_completed(self) -> int:
        """Run finished operations' callbacks (on the loop thread); returns how many.

        Also called from inside a long receive burst, so acks need not wait for it. A
        callback may handle events (a restored run's held ones) that call this again:
        that inner call returns at once, and this loop goes on draining."""
        if self._polling:
            return 0
        self._polling, n = True, 0
        try:
            while True:
                try:
                    done, result, error = self._completed.get_nowait()
                except queue.Empty:
                    return n
                n += 1
                done(result, error)
        finally:
            self._polling = False
