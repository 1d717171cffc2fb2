"""Run snapshots: which runs changed, when to write them, and the acks that follow.

On the event loop, once an event has been processed and its alerts published, one
cheap call: ``changed`` (the run is dirty; count; a flush that is due happens now, so
a snapshot never holds a run's ``hwm`` without the event's effect, nor an alert
transition that was not journaled first). Every
``flush_interval_s`` (sooner after ``flush_max_events``) ``flush`` encodes the dirty
runs on the loop (``store/codec.py``: immutable bytes) and hands the rows to the
store's writer thread; once that transaction has committed, each emitter is acked the
seq the snapshot covers (``EmitterLink.ack``). Periodic flushes are paced to
``flush_share`` of the loop's time. A run whose state no codec or SQLite takes is
quarantined alone (``daemon/quarantine.py``).

An alert transition also takes an immediate snapshot of its run (``encode``), which the
alert journal (``daemon/alert_path.py``) commits with the alert and its outbox rows.
With ``[state] enabled = false`` the same code acks at each flush without writing.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import structlog

from .emitter_link import EmitterLink
from .store import codec
from .store.config import StateConfig
from .quarantine import Quarantine
from .store.store import Store

log = structlog.get_logger("wtwind.store")

FLUSH_MAX_RUNS = 500  # runs snapshotted per flush call (~0.5-1 ms each, on the loop)


class Snapshots:
    def __init__(self, cfg: StateConfig, store: Store, link: EmitterLink, table, stats,
                 quarantine: Quarantine) -> None:
        self.cfg = cfg
        self.store = store
        self.link = link
        self.table = table
        self.stats = stats
        self.quarantine = quarantine
        self._quarantined = quarantine.reasons  # run -> why (a dict: the hot path's check)
        self.dirty: dict[str, object] = {}
        self._dirty_events = 0
        self._last_flush = time.monotonic()
        self._not_before = 0.0   # pacing: no periodic flush before (see ``flush``)
        self.flush_loop_s = 0.0  # event-loop seconds spent taking snapshots, in all
        self.flushes = 0
        self.flush_errors = 0
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Periodic flushes from now on (call once the run table is loaded)."""
        def periodic():
            try:
                self.tick()
            except Exception:  # task boundary: never lose the timer
                self.flush_errors += 1
                log.exception("flush_failed", path=self.store.path)
            finally:
                self._timer = loop.call_later(self.cfg.flush_interval_s / 2, periodic)

        self._timer = loop.call_later(self.cfg.flush_interval_s / 2, periodic)

    def close(self) -> None:
        """Final snapshot of every dirty run (at shutdown, before the store closes)."""
        if self._timer is not None:
            self._timer.cancel()
        while self.flush():
            pass

    # ---- hot path ----------------------------------------------------------------------------
    def changed(self, run, n: int = 1) -> None:
        """``n`` events changed the run (their effects and alerts are done): mark it; flush
        if due. A batch's events of one run are marked at once (``Ingest``)."""
        if run.run not in self._quarantined:  # mark(), inlined: once per event or group
            self.dirty[run.run] = run
        before = self._dirty_events
        self._dirty_events = before + n
        if self._dirty_events >= self.cfg.flush_max_events:
            self.flush()
        elif before >> 8 != self._dirty_events >> 8:  # a busy loop may starve the timer: check here too
            self.tick()

    def mark(self, run) -> None:
        """The run changed: snapshot it at the next flush."""
        if run.run not in self.quarantine:
            self.dirty[run.run] = run

    # ---- flushes ----------------------------------------------------------------------------
    def tick(self) -> None:
        if self.store.writer is not None:
            self.store.writer.poll_completed()  # acks for what has committed since
        now = time.monotonic()
        if now - self._last_flush >= self.cfg.flush_interval_s and now >= self._not_before:
            self.flush()

    def flush(self, limit: int = FLUSH_MAX_RUNS) -> int:
        """Snapshot dirty runs (on the loop), commit off the loop, ack after commit.

        At most ``limit`` runs a call, oldest change first, so 10k busy runs cost
        several short pauses of the loop, not one long one. The next periodic flush waits
        until this one's loop time is at most ``flush_share`` of the time since it began
        (2,000 busy runs spent 43% of the loop on snapshots at a 0.5 s interval)."""
        self._last_flush = start = time.monotonic()
        if not self.dirty:
            return 0
        try:
            return self._flush(limit)
        finally:
            spent = time.monotonic() - start
            self.flush_loop_s += spent
            self._not_before = start + spent / self.cfg.flush_share

    def _flush(self, limit: int) -> int:
        if len(self.dirty) <= limit:
            runs, self.dirty = list(self.dirty.values()), {}
        else:
            names = list(itertools.islice(self.dirty, limit))
            runs = [self.dirty.pop(n) for n in names]
            self._last_flush -= self.cfg.flush_interval_s  # the rest at the next turn
        self._dirty_events = 0
        if self.store.writer is None:
            self.link.ack(self.link.marks(runs))
            return len(runs)
        self._write(runs)
        return len(runs)

    def _write(self, runs) -> None:
        """Encode each run (a failure quarantines that run alone) and hand the rows over."""
        rows, kept = [], []
        for r in runs:
            row = self.encode(r, "encode")
            if row is not None:
                rows.append(row)
                kept.append(r)
        if not rows:
            return
        marks = self.link.marks(kept)
        self.store.write_runs(rows, lambda failed, err: self._flushed(kept, marks, failed, err))

    def encode(self, run, where: str):
        """The run's snapshot row (``codec.encode``), or None: quarantined, now or before."""
        if run.run in self.quarantine:
            return None
        try:
            return codec.encode(run)
        except Exception as exc:  # one run's state no codec takes: that run alone
            self.flush_errors += 1
            self.quarantine.add(run, f"{type(exc).__name__}: {exc}", where)
            return None

    def _flushed(self, runs, marks, failed, err) -> None:
        if err is not None:  # the transaction itself failed (disk, lock): all of it again later
            self.flush_errors += 1
            for r in runs:  # emitters keep the events meanwhile
                self.dirty.setdefault(r.run, r)
            return
        for r in runs:
            if r.run in failed:
                self.flush_errors += 1
                self.quarantine.add(r, failed[r.run], "write")
        self.flushes += 1
        self.link.ack([m for m in marks if m[0].run not in failed])

    def write_failed(self, failed: dict[str, str]) -> None:
        """Runs whose snapshot row SQLite refused (``{run: why}``) in another transaction
        (the alert journal's): quarantined, as a flush's would be."""
        for name, why in failed.items():
            run = self.table.get(name)
            if run is not None:
                self.flush_errors += 1
                self.quarantine.add(run, why, "write")

    def evict(self, run) -> None:
        """A run leaving memory (TTL): make sure its last state is written."""
        if self.dirty.pop(run.run, None) is not None and self.store.writer is not None:
            self._write([run])
        self.quarantine.forget(run.run)
