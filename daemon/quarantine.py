"""Poison isolation for run snapshots: one run that cannot be stored never blocks the rest.

A run's snapshot can fail to encode (a value no codec takes) or to write (a value SQLite
cannot bind: ``store/run_rows.py``). The failing run alone is *quarantined*: logged (ERROR,
rate-limited, with the reason), counted, no longer snapshotted, its emitters told once
with an ``error`` reply (reason ``quarantined``) and never acked, so they keep their
events. The run stays in memory and keeps being watched; the rest of the flush commits.
"""

from __future__ import annotations

from typing import Callable

import structlog

from wtwin.emitters import wire

from .logsetup import RateLimited

log = structlog.get_logger("wtwind.store")


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
