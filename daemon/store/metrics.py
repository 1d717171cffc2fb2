"""Prometheus families for the store, read at scrape time (a DaemonCollector provider)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def collect(store):
    """Metric families for the store (a DaemonCollector provider)."""
    w = store.writer
    yield GaugeMetricFamily("wtwind_store_enabled", "1 when run state is written to SQLite",
                            value=1.0 if store.durable else 0.0)
    yield CounterMetricFamily("wtwind_store_flushes", "Snapshot batches committed", value=store.flushes)
    yield CounterMetricFamily("wtwind_store_write_errors", "Store transactions rolled back",
                              value=w.errors if w else 0)
    yield CounterMetricFamily("wtwind_store_commits", "Store transactions committed",
                              value=w.commits if w else 0)
    yield CounterMetricFamily("wtwind_store_snapshot_loop_seconds",
                              "Event-loop time spent taking run snapshots (paced to [state] flush_share)",
                              value=store.flush_loop_s)
    yield GaugeMetricFamily("wtwind_store_dirty_runs", "Runs with unwritten changes", value=len(store._dirty))
    yield GaugeMetricFamily("wtwind_store_restored_runs", "Runs restored from the store at startup",
                            value=store.restored)
