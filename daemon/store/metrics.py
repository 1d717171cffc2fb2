"""Prometheus families for the store and the run snapshots, read at scrape time."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..described import described


class StoreCollector:
    """Registered on the daemon's registry; ``collect`` only reads counters."""

    def __init__(self, store, snapshots, restores, alerts=None) -> None:
        self.store = store
        self.snapshots = snapshots
        self.restores = restores
        self.alerts = alerts

    def describe(self):
        return described(
            counters=("wtwind_store_flushes", "wtwind_store_write_errors", "wtwind_store_commits",
                      "wtwind_store_full_commits", "wtwind_store_snapshot_loop_seconds",
                      "wtwind_store_failed_operations", "wtwind_store_flush_errors",
                      "wtwind_store_journal_errors", "wtwind_store_quarantined_runs",
                      "wtwind_store_pruned_runs", "wtwind_store_pruned_bytes"),
            gauges=("wtwind_store_enabled", "wtwind_store_dirty_runs",
                    "wtwind_store_quarantined_runs_current", "wtwind_store_failing",
                    "wtwind_store_used_bytes", "wtwind_store_restored_runs"))

    def collect(self):
        return _families(self.store, self.snapshots, self.restores, self.alerts)


def _families(store, snaps, restores, alerts):
    w = store.writer
    yield GaugeMetricFamily("wtwind_store_enabled", "1 when run state is written to SQLite",
                            value=1.0 if store.durable else 0.0)
    yield CounterMetricFamily("wtwind_store_flushes", "Snapshot batches committed", value=snaps.flushes)
    yield CounterMetricFamily("wtwind_store_write_errors", "Store transactions rolled back",
                              value=w.errors if w else 0)
    yield CounterMetricFamily("wtwind_store_commits", "Store transactions committed",
                              value=w.commits if w else 0)
    yield CounterMetricFamily("wtwind_store_full_commits",
                              "Store transactions committed with synchronous=FULL (alerts with their outbox rows)",
                              value=w.full_commits if w else 0)
    yield CounterMetricFamily("wtwind_store_snapshot_loop_seconds",
                              "Event-loop time spent taking run snapshots (paced to [state] flush_share)",
                              value=snaps.flush_loop_s)
    yield GaugeMetricFamily("wtwind_store_dirty_runs", "Runs with unwritten changes", value=len(snaps.dirty))
    yield CounterMetricFamily("wtwind_store_failed_operations",
                              "Store operations that failed even in a transaction of their own",
                              value=w.failed_ops if w else 0)
    yield CounterMetricFamily("wtwind_store_flush_errors",
                              "Run snapshots that could not be encoded or written", value=snaps.flush_errors)
    yield CounterMetricFamily("wtwind_store_journal_errors",
                              "Alert commits that failed (journal, snapshot and outbox rows together; tried again twice)",
                              value=alerts.journal_errors if alerts is not None else 0)
    yield CounterMetricFamily("wtwind_store_quarantined_runs",
                              "Runs quarantined because their state cannot be stored",
                              value=snaps.quarantine.total)
    yield GaugeMetricFamily("wtwind_store_quarantined_runs_current", "Runs in quarantine now",
                            value=len(snaps.quarantine))
    yield GaugeMetricFamily("wtwind_store_failing", "1 while persistence is failing (/readyz is red)",
                            value=1.0 if store.failing else 0.0)
    pruned = CounterMetricFamily("wtwind_store_pruned_runs",
                                 "Stored runs deleted, oldest first ([state] retention_days, max_runs, max_bytes)",
                                 labels=["reason"])
    for reason, key in (("retention", "age"), ("max_runs", "count"), ("max_bytes", "size")):
        pruned.add_metric([reason], store.pruned[key])
    yield pruned
    yield CounterMetricFamily("wtwind_store_pruned_bytes", "Bytes the pruned runs held (estimate)",
                              value=store.pruned_bytes)
    yield GaugeMetricFamily("wtwind_store_used_bytes", "Bytes in the database's used pages, at the last prune",
                            value=store.used_bytes)
    yield GaugeMetricFamily("wtwind_store_restored_runs", "Runs restored from the store at startup",
                            value=restores.restored)
