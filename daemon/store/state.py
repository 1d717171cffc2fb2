"""`StateStore`: the server's one handle on durable state (or on none, when disabled).

On the event loop it does three cheap things per event: drop duplicates by the
per-emitter high-water ``seq`` (``admit``), mark the run dirty, and count. Every
``flush_interval_s`` (sooner after ``flush_max_events``) it snapshots the dirty runs
on the loop, hands the bytes to the writer thread, and once that transaction has
committed it acks each emitter the seq the snapshot covers. An alert transition
forces an immediate snapshot of its run committed with ``synchronous=FULL`` together
with the alert itself and its outbox rows (one commit), so a replay after a crash
resumes just after the alert and cannot raise it a second time under another
idempotency key, and a committed alert is never left unrouted.

With ``[state] enabled = false`` the same code acks at each flush without writing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Callable

import structlog

from wtwin.emitters import wire
from wtwin.detect.alert import Alert

from . import codec
from .config import StateConfig
from .db import connect, open_db
from .metrics import collect  # noqa: F401  (the server imports it from here)
from .outbox import SqliteOutbox
from .quarantine import Quarantine, write_runs
from .writer import Writer

__all__ = ["StateStore", "collect"]

log = structlog.get_logger("wtwind.store")

_INSERT_ALERT = """INSERT OR IGNORE INTO alerts(key, run, kind, status, severity, step, body,
    created_at) VALUES (?,?,?,?,?,?,?,?)"""
ALERT_RETRY_S = (0.25, 0.5)  # a failed alert commit is tried again after these (a busy disk)
FLUSH_MAX_RUNS = 500  # runs snapshotted per flush call (~0.5-1 ms each, on the loop)
NACK_INTERVAL_S = 1.0  # a re-send of 20k events takes a while to arrive


Extra = tuple[Callable[[str], object], Callable[[str, object], None]]


class StateStore:
    def __init__(self, cfg: StateConfig, table, stats, send: Callable[[bytes, bytes], bool], *,
                 extras: dict[str, Extra] | None = None) -> None:
        """``extras``: other components' per-run state stored in the run's snapshot, by
        name: (``snapshot(run) -> JSON-able or None``, ``restore(run, state)``)."""
        self.cfg = cfg
        self.extras = dict(extras or {})
        self.table = table
        self.stats = stats
        self.send = send
        self.path = cfg.path
        self.writer: Writer | None = None
        self._conn = None
        self._reader = None
        self._lock = None
        self._dirty: dict[str, object] = {}
        self._dirty_events = 0
        self._inflight: dict[str, tuple] = {}
        self._last_flush = time.monotonic()
        self._not_before = 0.0   # pacing: no periodic flush before (see ``flush``)
        self.flush_loop_s = 0.0  # event-loop seconds spent taking snapshots, in all
        self._nacks: dict[str, tuple[int, float]] = {}
        self.restored = 0
        self.flushes = 0
        self.flush_errors = 0
        self.journal_errors = 0  # alerts whose journal row failed (the outbox row is separate)
        self.quarantine = Quarantine(stats, send)
        self._timer: asyncio.TimerHandle | None = None
        # the durable outbox; usable once open() has run (the server starts delivery after)
        # DaemonConfig() built by hand has no path: memory only (config.load() always sets one)
        self.wanted = cfg.enabled and bool(cfg.path)
        self.outbox = SqliteOutbox(execute=self._execute) if self.wanted else None

    def _execute(self, fn, *, full: bool = True) -> asyncio.Future:
        return self.writer.call(fn, full=full)

    @property
    def durable(self) -> bool:
        return self.writer is not None

    @property
    def failing(self) -> bool:
        """Persistence is failing (not one quarantined run): /readyz turns red."""
        return self.writer is not None and self.writer.failing

    # ---- startup / shutdown --------------------------------------------------------------
    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Lock, check and migrate the database (ConfigError naming the file on failure)."""
        if not self.wanted:
            log.info("store_disabled", hint="run state is in memory only; [state] enabled/path")
            return
        self._conn, self._lock = open_db(self.path, busy_timeout_s=self.cfg.busy_timeout_s)
        self._reader = connect(self.path, busy_timeout_s=self.cfg.busy_timeout_s)
        self.writer = Writer(self._conn, loop, synchronous=self.cfg.synchronous)
        self.table.on_create = self._on_create
        self.outbox.attach(self._reader)
        log.info("store_opened", path=self.path)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Periodic flushes from now on (call once the run table is loaded)."""
        def periodic():
            try:
                self.tick()
            except Exception:  # task boundary: never lose the timer (issue 15, attack 2)
                self.flush_errors += 1
                log.exception("flush_failed", path=self.path)
            finally:
                self._timer = loop.call_later(self.cfg.flush_interval_s / 2, periodic)

        self._timer = loop.call_later(self.cfg.flush_interval_s / 2, periodic)

    def load(self, now: float, *, idle_ttl_s: float, ended_ttl_s: float) -> int:
        """Bring back every run still live by the TTLs; returns how many.

        Each run's status, step, alerts and extras are restored now (the API and /metrics
        show them at once); its detectors' state when its next event arrives."""
        if self._reader is None:
            return 0
        rows = self._reader.execute(
            "SELECT run, config, snapshot FROM runs WHERE snapshot IS NOT NULL AND "
            "((status = 'running' AND last_seen > ?) OR last_seen > ?) ORDER BY last_seen DESC",
            (now - idle_ttl_s, now - ended_ttl_s)).fetchall()
        on_create, self.table.on_create = self.table.on_create, None
        try:
            for name, config, blob in rows:
                run = self.table.get_or_create(name, now)
                if run is None:
                    break
                self._restore_into(run, config, blob)
        finally:
            self.table.on_create = on_create
        self.restored = len(self.table)
        return self.restored

    async def close(self) -> None:
        """Final snapshot of every dirty run, then stop the writer (at shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
        while self.flush():
            pass
        if self.writer is not None:
            done = await asyncio.get_running_loop().run_in_executor(None, self.writer.close)
            if not done:
                log.error("store_close_timeout", path=self.path)
        for conn in (self._reader, self._conn):
            if conn is not None:
                conn.close()
        if self._lock is not None:
            self._lock.release()

    # ---- hot path --------------------------------------------------------------------------
    def admit(self, run, ev: dict) -> bool:
        """False for an event already processed (or one to re-send first); marks dirty.

        Any flush happens first, so a snapshot never holds an hwm without its effect."""
        self._dirty_events += 1
        if self._dirty_events >= self.cfg.flush_max_events:
            self.flush()
        elif not self._dirty_events & 255:  # a busy loop may starve the timer: check here too
            self.tick()
        em = ev.get("emitter")
        if run.frozen is not None:
            self._thaw(run)
        if em is not None:
            seq, hwm = ev["seq"], run.hwm.get(em, 0)
            if seq <= hwm:
                self.stats.dropped["duplicate"] += 1
                return False
            if seq > hwm + 1:
                base = ev.get("base")
                if base is not None and seq > max(hwm + 1, base):
                    self.stats.dropped["out_of_order"] += 1  # the emitter still holds the gap
                    self._nack(run, em, hwm)
                    return False
                if base is not None and base > hwm + 1:  # no longer held by the emitter
                    self.stats.dropped["seq_gap"] += base - hwm - 1
            run.hwm[em] = seq
        run.events += 1
        if run.run not in self.quarantine:
            self._dirty[run.run] = run
        return True

    def touch(self, name: str) -> None:
        """Another component changed this run's extra state: snapshot it at the next flush."""
        run = self.table.get(name)
        if run is not None:
            self._dirty[name] = run

    def _thaw(self, run) -> None:
        try:
            run.thaw()
        except Exception:  # an unreadable snapshot: the run goes on with fresh detectors
            self.stats.loop_errors += 1
            log.exception("snapshot_restore_failed", run=run.run, path=self.path)

    def _encode(self, run) -> tuple:
        extra = {}
        for name, (snap, _restore) in self.extras.items():
            state = snap(run.run)
            if state is not None:
                extra[name] = state
        return codec.encode(run, extra)

    def _nack(self, run, em: str, hwm: int) -> None:
        last = self._nacks.get(em)
        now = time.monotonic()
        if last is not None and last[0] == hwm and now - last[1] < NACK_INTERVAL_S:
            return
        self._nacks[em] = (hwm, now)
        identity = run.identities.get(em)
        if identity is not None:
            self.send(identity, wire.reply("ack", seq=hwm, emitter=em, resend=True))

    # ---- snapshots ----------------------------------------------------------------------
    def tick(self) -> None:
        if self.writer is not None:
            self.writer.poll_completed()  # acks for what has committed since
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
        if not self._dirty:
            return 0
        try:
            return self._flush(limit)
        finally:
            spent = time.monotonic() - start
            self.flush_loop_s += spent
            self._not_before = start + spent / self.cfg.flush_share

    def _flush(self, limit: int) -> int:
        if len(self._dirty) <= limit:
            runs, self._dirty = list(self._dirty.values()), {}
        else:
            names = list(itertools.islice(self._dirty, limit))
            runs = [self._dirty.pop(n) for n in names]
            self._last_flush -= self.cfg.flush_interval_s  # the rest at the next turn
        self._dirty_events = 0
        if self.writer is None:
            self._send_acks([(r, em, seq) for r in runs for em, seq in r.hwm.items()])
            return len(runs)
        self._write(runs)
        return len(runs)

    def _write(self, runs) -> None:
        """Encode each run (a failure quarantines that run alone) and hand the rows over."""
        rows, kept = [], []
        for r in runs:
            row = self._encode_or_quarantine(r, "encode")
            if row is not None:
                rows.append(row)
                kept.append(r)
        if not rows:
            return
        acks = [(r, em, seq) for r in kept for em, seq in r.hwm.items()]
        for row in rows:
            self._inflight[row[0]] = row
        self.writer.submit(lambda conn: write_runs(conn, rows),
                           done=lambda failed, err: self._flushed(rows, kept, acks, failed, err))

    def _encode_or_quarantine(self, run, where: str):
        if run.run in self.quarantine:
            return None
        try:
            return self._encode(run)
        except Exception as exc:  # one run's state no codec takes: that run alone
            self.flush_errors += 1
            self.quarantine.add(run, f"{type(exc).__name__}: {exc}", where)
            return None

    def _flushed(self, rows, runs, acks, failed, err) -> None:
        for row in rows:
            if self._inflight.get(row[0]) is row:
                del self._inflight[row[0]]
        if err is not None:  # the transaction itself failed (disk, lock): all of it again later
            self.flush_errors += 1
            for r in runs:  # emitters keep the events meanwhile
                self._dirty.setdefault(r.run, r)
            return
        for r in runs:
            if r.run in failed:
                self.flush_errors += 1
                self.quarantine.add(r, failed[r.run], "write")
        self.flushes += 1
        self._send_acks([a for a in acks if a[0].run not in failed])

    def _send_acks(self, acks) -> None:
        for run, em, seq in acks:
            identity = run.identities.get(em)
            if identity is not None:
                self.send(identity, wire.reply("ack", seq=seq, emitter=em))

    def evict(self, run) -> None:
        """A run leaving memory (TTL): make sure its last state is written."""
        if self._dirty.pop(run.run, None) is not None and self.writer is not None:
            self._write([run])
        self.quarantine.forget(run.run)

    # ---- alerts -----------------------------------------------------------------------------
    def on_alert(self, alert: Alert, staged=None) -> None:
        """Journal the alert with its run's snapshot and its outbox rows (``staged``, routed
        by delivery), in one FULL transaction, before any sink sees it. With no store, the
        rows go to the memory outbox at once. A failed commit is tried again twice, without
        the snapshot (the run is still dirty: the next flush writes it)."""
        if self.writer is None:
            if staged is not None:
                staged.finish(staged.op(None), None)
            return
        run = self.table.get(alert.run)
        row = self._encode_or_quarantine(run, "alert") if run is not None else None
        if row is not None:
            self._inflight[row[0]] = row
        self._commit_alert(alert, staged, row, 0)

    def _commit_alert(self, alert: Alert, staged, row, attempt: int) -> None:
        params = (alert.idempotency_key, alert.run, alert.kind, alert.status, alert.severity,
                  alert.step, json.dumps(alert.to_dict()), time.time())

        def op(conn):
            conn.execute(_INSERT_ALERT, params)
            failed = write_runs(conn, [row]) if row is not None else {}
            return failed, (staged.op(conn) if staged is not None else None)

        self.writer.submit(op, full=True,
                           done=lambda res, err: self._journaled(row, res, err, alert, staged, attempt))

    def _journaled(self, row, res, err, alert: Alert, staged, attempt: int) -> None:
        if row is not None and self._inflight.get(row[0]) is row:
            del self._inflight[row[0]]
        if err is not None and attempt < len(ALERT_RETRY_S):
            self.journal_errors += 1
            log.warning("alert_commit_retry", run=alert.run, kind=alert.kind, error=str(err)[:300])
            self.writer.loop.call_later(ALERT_RETRY_S[attempt], self._commit_alert, alert, staged, None,
                                        attempt + 1)
            return
        if staged is not None:
            staged.finish(None if err else res[1], err)
        if err is not None and staged is None:  # with rows, delivery reports it (alert_lost)
            log.error("alert_not_journaled", run=alert.run, kind=alert.kind, error=str(err)[:300])
        elif res[0]:
            run = self.table.get(alert.run)
            if run is not None:
                self.quarantine.add(run, res[0][alert.run], "write")

    # ---- lazy restore ------------------------------------------------------------------------
    def _on_create(self, run) -> None:
        row = self._inflight.get(run.run)
        if row is not None:
            self._restore_into(run, row[3], row[7])
            return
        found = self._reader.execute("SELECT config, snapshot FROM runs WHERE run = ?",
                                     (run.run,)).fetchone()
        if found is not None and found[1] is not None:
            self._restore_into(run, found[0], found[1])

    def _restore_into(self, run, config: str, blob: bytes) -> None:
        try:
            d = codec.restore(run, config, blob)
            for name, (_snap, restore) in self.extras.items():
                if d.get(name) is not None:
                    restore(run.run, d[name])
        except Exception:  # an unreadable snapshot: start the run fresh, say so
            self.stats.loop_errors += 1
            log.exception("snapshot_restore_failed", run=run.run, path=self.path)

