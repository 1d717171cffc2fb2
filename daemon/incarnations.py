"""A run name used again is a new run (issue 37): a ``run_start`` under the name of a run
that ended, with no ``resumed_from``, starts a new incarnation of the name.

The ended run keeps its page, history and alerts under an archived name, ``<name>~<n>``
(n = 1 for the first earlier run, 2 for the next...): in memory (the run table moves it),
in the store (its rows are renamed on the writer thread, before any later snapshot of
either run) and in the next snapshot. The new run starts fresh under the name, with the
ended run's owner and emitter marks (so the trainer's next seq is no gap), and its page
lists the earlier runs of its name (`earlier`). A resume stays explicit: ``resumed_from``
on the ``run_start`` (``connect(..., resume=True)``, and the HF and Lightning callbacks
on a checkpoint resume) goes on with the ended run as before (docs/PROTOCOL.md).
"""

from __future__ import annotations

import re

import structlog

log = structlog.get_logger("wtwind.incarnations")
ENDED = ("completed", "failed", "killed", "stopped")
SEP = "~"


def is_new(run, ev: dict) -> bool:
    """Does ``ev``, a ``run_start`` for ``run``, start a new incarnation of its name?"""
    return run.status in ENDED and not ev.get("resumed_from")


def archived_of(name: str, names) -> list[str]:
    """The archived names of ``name`` among ``names``, newest first."""
    pat = re.compile(re.escape(name + SEP) + r"(\d+)$")
    found = [(int(m.group(1)), n) for n in names if (m := pat.match(n))]
    return [n for _, n in sorted(found, reverse=True)]


class Incarnations:
    def __init__(self, table, store, snapshots, admission) -> None:
        self.table, self.store, self.snapshots, self.admission = table, store, snapshots, admission
        self.started = 0      # new incarnations, since the daemon started

    def earlier(self, name: str) -> list[str]:
        """The earlier runs of ``name`` (in memory or stored), newest first."""
        names = {r.run for r in self.table} | set(self.store.runs)
        return archived_of(name, names)

    def begin(self, run, now: float):
        """Archive the ended ``run`` under ``<name>~<n>`` and return the new run of its name."""
        name = run.run
        known = self.earlier(name)
        n = 1 + max((int(k.rsplit(SEP, 1)[1]) for k in known), default=0)
        old = f"{name}{SEP}{n}"
        self.table.rename(name, old)
        self.snapshots.dirty.pop(name, None)
        if self.store.writer is not None:
            self.store.rename_run(name, old)
        self.snapshots.mark(run)                 # its snapshot, under the archived name
        new = self.table.get_or_create(name, now, creator=run.creator, force=True)
        self.admission.per_client[run.creator] += 1
        new.owner, new.marks = run.owner, run.marks
        self.started += 1
        log.info("run_name_reused", run=name, earlier=old, status=run.status)
        return new
