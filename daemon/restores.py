"""Bringing stored runs back into memory, without the event loop ever waiting on the disk.

At startup (``load``) every run still live by the TTLs comes back: its status, step,
alerts, spectral state and seq marks at once (the API and /metrics show them), its
detectors' state as bytes decoded when its next event arrives (``RunState.thaw``). The
read runs on the store's thread; the loop only decodes.

Later, an event for a run that is not in memory but is in the store (expired by a TTL,
then resumed) is *held*: the run's row is read on the store's thread, behind any write
of it still queued, and meanwhile that run's events wait in order (at most
``MAX_HELD_EVENTS`` of them; beyond that they are dropped, counted ``restoring``, and
the emitter re-sends them, since none was acked). Once the row is back the held events
go through the normal path, in order: admission creates the run (its quotas and owner
checks apply as to any new run) and restores the row into it (``fill``).
"""

from __future__ import annotations

import asyncio

import structlog

from .run_table import RunTable
from .store import codec
from .store.store import Store

log = structlog.get_logger("wtwind.store")

MAX_HELD_EVENTS = 10_000  # per run being restored


class Restores:
    def __init__(self, store: Store, table: RunTable, stats, references=None) -> None:
        self.store, self.references = store, references  # re-resolves a run's references

        self.table = table
        self.stats = stats
        self.restored = 0
        self._held: dict[str, list[tuple]] = {}  # run -> events waiting for its row
        self._fetched: dict[str, tuple] = {}     # run -> its row, while its held events run

    async def load(self, now: float, *, idle_ttl_s: float, ended_ttl_s: float) -> int:
        """Bring back every run still live by the TTLs; returns how many."""
        rows = await self.store.live_runs(now, idle_ttl_s=idle_ttl_s, ended_ttl_s=ended_ttl_s)
        for name, config, blob in rows:
            run = self.table.get_or_create(name, now)
            if run is None:
                break
            self._restore_into(run, config, blob)
        self.restored = len(self.table)
        return self.restored

    def hold(self, name: str, item: tuple, then) -> bool:
        """True when ``name`` must come back from the store first: ``item`` waits, and
        ``then(*item)`` runs for it, in order, once the run is back (or could not be)."""
        held = self._held.get(name)
        if held is None:
            if name not in self.store.runs or self.table.get(name) is not None:
                return False
            held = self._held[name] = []
            self.store.read_run(name, lambda found, err: self._read(name, found, err, then))
        if len(held) >= MAX_HELD_EVENTS:
            self.stats.dropped["restoring"] += 1  # not acked: the emitter sends it again
            return True
        held.append(item)
        return True

    @property
    def pending(self) -> int:
        """Runs whose row is being read."""
        return len(self._held)

    async def settle(self) -> None:
        """Wait until every run being read is back and its events handled (at shutdown,
        before the last snapshots)."""
        while self._held:
            self.store.writer.poll_completed()
            await asyncio.sleep(0.001)

    def thaw(self, run) -> None:
        """Before a restored run's first event: decode its detectors' state (an unreadable
        one is logged and counted; the run goes on with fresh detectors)."""
        if run.frozen is None:
            return
        try:
            run.thaw()
        except Exception:
            self.stats.loop_errors += 1
            log.exception("snapshot_restore_failed", run=run.run, path=self.store.path)

    def fill(self, run) -> None:
        """A run admission has just created: its stored state, if its row was read for it.

        Admission creates it (so the client's run quota counts it, and an event refused
        there restores nothing), then calls this."""
        row = self._fetched.get(run.run)
        if row is not None:
            self._restore_into(run, *row)

    def _read(self, name: str, found, err, then) -> None:
        held = self._held.pop(name, [])
        if err is not None:
            self.stats.loop_errors += 1
            log.error("snapshot_read_failed", run=name, error=str(err)[:300],
                      hint="the run starts with fresh state")
        elif found is not None and found[1] is not None:
            self._fetched[name] = found
        try:
            for item in held:  # through admission, which creates the run and calls fill()
                then(*item)
        finally:
            self._fetched.pop(name, None)  # refused all along: read again at its next event

    def _restore_into(self, run, config: str, blob: bytes) -> None:
        try:
            codec.restore(run, config, blob)
            if run.refs is not None and self.references is not None:
                self.references.resolve(run)
        except Exception:  # an unreadable snapshot: start the run fresh, say so
            self.stats.loop_errors += 1
            log.exception("snapshot_restore_failed", run=run.run, path=self.store.path)
