"""The daemon's Prometheus collectors describe what they export, and the registry
refuses a metric name registered twice (daemon/described.py, daemon/wiring.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from prometheus_client import CollectorRegistry

from wtwin.daemon.config import DaemonConfig, ListenConfig
from wtwin.daemon.metrics import DaemonCollector
from wtwin.daemon.store.config import StateConfig
from wtwin.daemon.wiring import build
from wtwin.detect.alert import Alert
from wtwin.sinks.metrics import DeliveryCollector


@pytest.fixture
def parts(tmp_path):
    config = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/w.sock",)),
                          state=StateConfig(enabled=False))
    p = build(dataclasses.replace(config, shard=dataclasses.replace(config.shard, name="s0")))
    p.table.get_or_create("r", time.time())
    p.alerts.publish(Alert(run="r", kind="drift", severity="warning", status="firing", step=3,
                           started_at=1.0))
    yield p
    p.receiver.close()


def _collectors(registry: CollectorRegistry) -> list:
    return list(registry._collector_to_names)  # prometheus_client keeps no public list


class TestDescribe:
    def test_each_collector_names_what_it_collects(self, parts):
        """Every family a scrape yields is one that ``describe()`` named, with its type."""
        described = [c for c in _collectors(parts.registry) if hasattr(c, "describe")]
        assert len(described) >= 5   # daemon, jobs, receiver, store, delivery (curve: when on)
        for collector in described:
            names = {(f.name, f.type) for f in collector.describe()}
            got = {(f.name, f.type) for f in collector.collect()}
            assert got <= names, (type(collector).__name__, got - names)

    def test_describe_reads_no_state(self, parts):
        """``describe()`` families carry no samples: values come at scrape time only."""
        for collector in _collectors(parts.registry):
            if hasattr(collector, "describe"):
                assert all(not f.samples for f in collector.describe())


class TestDuplicates:
    def test_a_metric_name_registered_twice_raises(self, parts):
        """A second collector exporting the daemon's families is refused at registration."""
        with pytest.raises(ValueError, match="Duplicated timeseries"):
            parts.registry.register(DaemonCollector(parts.table, parts.stats))

    def test_one_family_of_another_collector_is_enough(self, parts):
        """The delivery's families once more, under another collector object: refused."""
        with pytest.raises(ValueError, match="Duplicated timeseries"):
            parts.registry.register(DeliveryCollector(parts.delivery))

    def test_the_same_collectors_on_a_fresh_registry_register(self, parts):
        """Nothing is refused that is not a duplicate: the describes agree with each other."""
        fresh = CollectorRegistry(auto_describe=True)
        for collector in _collectors(parts.registry):
            fresh.register(collector)
        assert len(_collectors(fresh)) == len(_collectors(parts.registry))
