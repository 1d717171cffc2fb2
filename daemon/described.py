"""What a collector says it exports, before any scrape: ``describe()``'s families.

The daemon's registry is built with ``auto_describe=True`` (daemon/wiring.py), so each
collector's ``describe()`` runs at registration and a metric name registered twice
raises there, not silently at a scrape. The families carry names and types only; the
values come from ``collect()`` at scrape time. ``tests/test_collectors.py`` holds each
collector's ``collect()`` to what its ``describe()`` names.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                    InfoMetricFamily)

_KINDS = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "info": InfoMetricFamily,
          "histogram": HistogramMetricFamily}


def described(counters: Iterable[str] = (), gauges: Iterable[str] = (), infos: Iterable[str] = (),
              histograms: Iterable[str] = ()) -> list:
    """Empty families of these names, by type (a name as ``collect()`` gives it: a
    counter without ``_total``, an info without ``_info``)."""
    out = []
    for kind, names in (("counter", counters), ("gauge", gauges), ("info", infos),
                        ("histogram", histograms)):
        out += [_KINDS[kind](name, name) for name in names]
    return out
