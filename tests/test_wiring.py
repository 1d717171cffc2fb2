"""``build(config)`` (daemon/wiring.py): the graph it makes, and collectors that only read."""

from __future__ import annotations

import dataclasses
import time

from prometheus_client.exposition import generate_latest

from wtwin.daemon.config import DaemonConfig, ListenConfig
from wtwin.daemon.jobs.model import JobResult
from wtwin.daemon.store.config import StateConfig
from wtwin.daemon.wiring import build
from wtwin.detect.alert import Alert


def _config(tmp_path) -> DaemonConfig:
    return DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/w.sock",)),
                        state=StateConfig(path=str(tmp_path / "w.db")))


class TestBuild:
    def test_every_part_shares_one_table_one_store_and_one_link(self, tmp_path):
        """The alert path commits through the snapshots and routes through delivery; the
        snapshots, restores, spectral service and alert path watch the same run table."""
        p = build(_config(tmp_path))
        try:
            assert p.alerts.snapshots is p.snapshots and p.alerts.delivery is p.delivery
            assert p.alerts.listeners == []
            assert p.snapshots.table is p.table and p.restores.table is p.table
            assert p.spectral.table is p.table and p.alerts.table is p.table
            assert p.snapshots.link is p.link and p.restores.store is p.snapshots.store is p.store
            assert p.delivery.outbox is p.store.outbox
        finally:
            p.receiver.close()

    def test_every_collector_is_on_the_registry_and_a_scrape_changes_nothing(self, tmp_path):
        """Families of each component come from the one registry; two scrapes in a row
        give the same text and leave the runs (spectral state included) as they were."""
        p = build(dataclasses.replace(_config(tmp_path), state=StateConfig(enabled=False)))
        try:
            run = p.table.get_or_create("r", time.time())
            p.spectral.on_result(JobResult(run="r", step=5, path="/ck.pt", want=("analyze",), epoch=None,
                                           outcome="failed", error="boom"))
            p.alerts.publish(Alert(run="r", kind="drift", severity="warning", status="firing", step=3,
                                   started_at=1.0))
            before = (len(p.table), run.spectral_result, len(run.series.markers))
            first = generate_latest(p.registry).decode()
            second = generate_latest(p.registry).decode()
            assert first == second
            assert (len(p.table), run.spectral_result, len(run.series.markers)) == before
            for name in ("wtwind_build_info", "wtwind_jobs_queue_depth", "wtwind_frames_bad_envelope_total",
                         "wtwind_store_enabled", "wtwind_deliveries_total"):
                assert f"\n{name}" in first, name
            assert 'wtwind_alerts_total{kind="drift",severity="warning"} 1.0' in first
            assert before[2] == 1  # the alert path marked the run's chart
            assert p.stats.loop_errors == 0 and p.delivery.outbox.counts() == {("log", "pending"): 1}
        finally:
            p.receiver.close()
