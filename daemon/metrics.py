"""Prometheus collector: renders live state at scrape time (nothing is pre-registered).

Per-run series exist only for running runs, capped at ``max_series_runs`` (most recently
active first); the number of runs beyond the cap is exported. Other components add
families by passing ``providers``: callables that yield metric families.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector as _Base

from .run_state import RunTable
from .stats import Stats
from .version import __version__

Provider = Callable[[], Iterable]

_RUN_GAUGES = (
    ("wtwind_run_loss", "Last training loss observed", lambda r, s: r.loss),
    ("wtwind_run_step", "Last training step observed", lambda r, s: r.step),
    ("wtwind_run_learning_rate", "Last learning rate sent by the emitter", lambda r, s: r.lr),
    ("wtwind_run_last_event_timestamp_seconds", "Unix time of the run's last event",
     lambda r, s: r.last_seen),
    ("wtwind_run_forecast_loss", "Loss the forecast expects at this step", lambda r, s: s and s.l_pred),
    ("wtwind_run_forecast_lower_loss", "Lower edge of the forecast band", lambda r, s: s and s.band_lo),
    ("wtwind_run_forecast_upper_loss", "Upper edge of the forecast band", lambda r, s: s and s.band_hi),
    ("wtwind_run_score_w", "W-Twin warning score W (above 0: degradation building)",
     lambda r, s: s and s.W),
    ("wtwind_run_score_d", "W-Twin deviation D (standardized residual)", lambda r, s: s and s.D),
    ("wtwind_run_confidence_q", "W-Twin forecast confidence Q in [0, 1]", lambda r, s: s and s.Q),
    ("wtwind_run_emitter_dropped_events", "Events the run's emitter reported dropping",
     lambda r, s: r.emitter_dropped),
)


class DaemonCollector(_Base):
    def __init__(self, table: RunTable, stats: Stats, *, max_series_runs: int = 1000,
                 providers: Iterable[Provider] = ()) -> None:
        self.table = table
        self.stats = stats
        self.max_series_runs = max_series_runs
        self.providers = list(providers)

    def collect(self):
        yield from self._self_metrics()
        yield from self._run_metrics()
        for provider in self.providers:
            yield from provider()

    def _self_metrics(self):
        info = InfoMetricFamily("wtwind_build", "wtwind build information")
        info.add_metric([], {"version": __version__})
        yield info
        running = sum(1 for r in self.table if r.status == "running")
        yield GaugeMetricFamily("wtwind_active_runs", "Runs currently running", value=running)
        yield GaugeMetricFamily("wtwind_known_runs", "Runs held in memory", value=len(self.table))
        yield _counter("wtwind_events_received", "Valid events received", ["type"],
                       self.stats.received)
        yield _counter("wtwind_events_rejected", "Events rejected as malformed", ["reason"],
                       self.stats.rejected)
        yield _counter("wtwind_events_dropped", "Valid events not processed", ["reason"],
                       self.stats.dropped)
        yield CounterMetricFamily("wtwind_loop_errors", "Errors caught on the event loop (detectors, "
                                  "listeners, snapshot restores), each logged with its traceback",
                                  value=self.stats.loop_errors)
        yield CounterMetricFamily("wtwind_emitters_evicted",
                                  "Emitter ids dropped from a full run after [runs] emitter_idle_s",
                                  value=self.stats.evicted_emitters)
        yield _counter("wtwind_http_refused", "HTTP requests refused (Host, Origin, token)", ["reason"],
                       self.stats.http_refused)
        yield _counter("wtwind_alerts", "Alerts fired", ["kind", "severity"],
                       {k: v for k, v in self.stats.alerts.items()})

    def _run_metrics(self):
        runs = sorted((r for r in self.table if r.status == "running"),
                      key=lambda r: r.last_seen, reverse=True)
        shown, hidden = runs[: self.max_series_runs], max(0, len(runs) - self.max_series_runs)
        yield GaugeMetricFamily("wtwind_runs_over_series_cap",
                                "Running runs not exported because of max_series_runs",
                                value=hidden)
        for name, doc, get in _RUN_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=["run"])
            for r in shown:
                val = get(r, r.last_state)
                if val is not None:
                    fam.add_metric([r.run], float(val))
            yield fam
        active = GaugeMetricFamily("wtwind_run_alert_active", "1 while an alert of this kind fires",
                                   labels=["run", "kind", "severity"])
        for r in shown:
            for kind, alert in r.policy.firing.items():
                active.add_metric([r.run, kind, alert.severity], 1.0)
        yield active


def _counter(name: str, doc: str, labels: list[str], values: dict) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, val in sorted(values.items()):
        fam.add_metric(list(key) if isinstance(key, tuple) else [key], val)
    return fam
