"""Periodic snapshots of the run table keep to their share of the event loop."""

from __future__ import annotations

import asyncio

import pytest

from helpers import admit_seq, until
from wtwin.daemon.errors import ConfigError


class TestFlushPacing:
    def test_periodic_snapshots_keep_to_their_share_of_the_loop(self, tmp_path):
        """After a flush that took the loop ``spent`` seconds, the next periodic flush
        waits until ``spent`` is at most ``flush_share`` of the time since it began, even
        though ``flush_interval_s`` has long passed; forced flushes are not held back."""
        import time

        from wtwin.daemon.emitter_link import EmitterLink
        from wtwin.daemon.restores import Restores
        from wtwin.daemon.run_table import RunTable
        from wtwin.daemon.snapshots import Snapshots
        from wtwin.daemon.stats import Stats
        from wtwin.daemon.store.config import StateConfig
        from wtwin.daemon.store.metrics import StoreCollector
        from wtwin.daemon.quarantine import Quarantine
        from wtwin.daemon.store.store import Store

        cfg = StateConfig(path=str(tmp_path / "s.db"), flush_interval_s=0.01, flush_share=0.05)
        table = RunTable(preset="pretraining", cooldown_s=0.0, max_runs=2000)

        stats, send = Stats(), lambda ident, frame: True
        link = EmitterLink(stats, send)

        def feed(store, step):
            for i in range(1000):
                run = table.get_or_create(f"run-{i}", 1.0)
                ev = {"v": 1, "type": "loss", "run": run.run, "seq": step, "step": step,
                      "loss": 3.0 + 1.0 / step + 0.001 * (i % 7), "emitter": run.run}
                assert admit_seq(link, run, ev, b"id", 1.0)
                run.observe(ev, 1.0)
                store.changed(run)

        async def scenario():
            db = Store(cfg)
            store = Snapshots(cfg, db, link, table, stats, Quarantine(stats, send))
            db.open(asyncio.get_running_loop())
            for step in range(1, 31):            # (admit ticks: periodic flushes meanwhile)
                feed(store, step)
            store.dirty = {r.run: r for r in table}
            assert store.flush(limit=1000) == 1000
            spent = store.flush_loop_s
            assert spent > 0 and store._not_before > time.monotonic()
            feed(store, 31)                      # every run dirty again; admit ticks on the way
            await asyncio.sleep(2 * cfg.flush_interval_s)
            if time.monotonic() < store._not_before:   # interval over, pacing not
                store.tick()
                assert len(store.dirty) == 1000, "a periodic flush ran before its pacing allowed"
            await asyncio.sleep(max(0.0, store._not_before - time.monotonic()) + 0.01)
            store.tick()
            assert len(store.dirty) == 500, "the paced flush never came (500 runs a call)"
            assert store.flush_loop_s > spent and store._not_before > time.monotonic()
            assert store.flush() == 500            # a direct (forced) flush is not paced
            samples = {f.name: f.samples[0].value
                       for f in StoreCollector(db, store, Restores(db, table, stats)).collect()}
            assert samples["wtwind_store_snapshot_loop_seconds"] == store.flush_loop_s
            store.close()
            await db.close()

        asyncio.run(scenario())

    def test_flush_share_outside_its_range_is_refused_naming_the_key(self):
        from wtwin.daemon.store.config import StateConfig

        for bad in (0.0, 1.5, -0.1):
            with pytest.raises(ConfigError, match="flush_share"):
                StateConfig(flush_share=bad)
