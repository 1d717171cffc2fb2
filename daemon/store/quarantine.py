"""Poison isolation for run snapshots: one run that cannot be stored never blocks the rest.

A run's snapshot can fail to encode (a value no codec takes) or to write (a value SQLite
cannot bind). Before issue 15 either failure rolled back the whole flush, re-marked every
run dirty and failed again at every flush, forever: no run was acked, nothing was
persisted. Now the failing run alone is *quarantined*: logged (ERROR, rate-limited,
with the reason), counted, no longer snapshotted, its emitters told once with an
``error`` reply (reason ``quarantined``) and never acked, so they keep their events. The
run stays in memory and keeps being watched; the rest of the flush commits.

``write_runs`` writes each row under a savepoint only when the fast ``executemany`` fails,
so the common case costs what it did.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Callable

import structlog

from wtwin.emitters import wire

from ..logsetup import RateLimited

log = structlog.get_logger("wtwind.store")

UPSERT_RUN = """INSERT INTO runs(run, status, preset, config, first_seen, last_seen, step,
    snapshot, updated_at) VALUES (?,?,?,?,?,?,?,?,?)
    ON CONFLICT(run) DO UPDATE SET status=excluded.status, preset=excluded.preset,
    config=excluded.config, last_seen=excluded.last_seen, step=excluded.step,
    snapshot=excluded.snapshot, updated_at=excluded.updated_at"""


# a value in the row is at fault (binding, constraint), not the database: quarantine the run;
# anything else (read-only, disk full, I/O) fails the transaction and is retried later
POISON = (OverflowError, ValueError, TypeError, sqlite3.InterfaceError, sqlite3.IntegrityError,
          sqlite3.DataError)


def write_runs(conn, rows) -> dict[str, str]:
    """Upsert the rows; returns ``{run: error}`` for rows that could not be written."""
    now = time.time()
    params = [(*row, now) for row in rows]
    conn.execute("SAVEPOINT runs")
    try:
        conn.executemany(UPSERT_RUN, params)
        conn.execute("RELEASE runs")
        return {}
    except POISON:  # one row is poisoned: find it, write the others
        conn.execute("ROLLBACK TO runs")
        conn.execute("RELEASE runs")
    failed = {}
    for p in params:
        conn.execute("SAVEPOINT one")
        try:
            conn.execute(UPSERT_RUN, p)
        except POISON as exc:
            conn.execute("ROLLBACK TO one")
            failed[p[0]] = f"{type(exc).__name__}: {exc}"
        conn.execute("RELEASE one")
    return failed


class Quarantine:
    """Runs whose snapshot cannot be stored, by name, with why."""

    def __init__(self, stats, send: Callable[[bytes, bytes], bool]) -> None:
        self.stats = stats
        self.send = send
        self.reasons: dict[str, str] = {}
        self.total = 0
        self._log = RateLimited(log)

    def __contains__(self, run: str) -> bool:
        return run in self.reasons

    def __len__(self) -> int:
        return len(self.reasons)

    def add(self, run, error: str, where: str) -> None:
        if run.run in self.reasons:
            return
        self.reasons[run.run] = error[:300]
        self.total += 1
        self._log.error("run_quarantined", "run_quarantined", run=run.run, where=where, error=error[:300],
                        hint="this run's state is not persisted and its events are not acked; "
                             "other runs are unaffected")
        frame = wire.reply("error", reason="quarantined", run=run.run,
                           message=f"run {run.run!r} cannot be persisted ({where}); "
                                   "its events are watched but not acknowledged")
        for identity in run.identities.values():
            self.send(identity, frame)

    def forget(self, run: str) -> None:
        self.reasons.pop(run, None)
