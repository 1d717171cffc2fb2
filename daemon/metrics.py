"""Prometheus collector: renders live state at scrape time (nothing is pre-registered).

Per-run series exist for running runs, and for ``ended_series_s`` after a run ended
while an alert fired (``wtwind_run_alert_active`` stays 1 for those alerts meanwhile) or
ended as failed or killed, so that a run that fails and exits at once still reaches
Alertmanager through the shipped rules; capped at ``max_series_runs`` (most recently active first), the number of runs
beyond the cap exported. Other components' families come from their own collectors,
each registered on the same registry (``daemon/wiring.py``). ``collect`` only reads.

A daemon with a shard name (``[shard] name``) says it in ``wtwind_shard_info{shard}``:
one series per daemon, not a label on every run series. Prometheus tells shards apart
by their target labels (``instance``, ``pod``) anyway, and a run lives on one shard, so
the rules and dashboards that aggregate ``by (run)`` work unchanged; a query that wants
the name joins it: ``... * on (instance) group_left (shard) wtwind_shard_info``.
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector as _Base

from wtwin.detect.alert import KINDS, SEVERITIES

from .described import described
from .run_state import RunState
from .run_table import RunTable
from .stats import Stats
from .version import __version__

STATUSES = ("running", "completed", "failed", "killed", "stopped")
SEVERITY_VALUE = {"info": 1, "warning": 2, "critical": 3}


def lower_band(r: RunState, s) -> float | None:
    """The band's lower edge; never below 0 for a run whose losses were all >= 0."""
    if s is None or s.band_lo is None:
        return None
    return max(0.0, s.band_lo) if r.nonnegative else s.band_lo


_RUN_GAUGES = (
    ("wtwind_run_loss", "Last training loss observed", lambda r, s: r.loss),
    ("wtwind_run_step", "Last training step observed", lambda r, s: r.step),
    ("wtwind_run_learning_rate", "Last learning rate sent by the emitter", lambda r, s: r.lr),
    ("wtwind_run_last_event_timestamp_seconds", "Unix time of the run's last event",
     lambda r, s: r.last_seen),
    ("wtwind_run_forecast_loss", "Loss the forecast expects at this step", lambda r, s: s and s.l_pred),
    ("wtwind_run_forecast_lower_loss", "Lower edge of the forecast band (>= 0 while every loss was)",
     lower_band),
    ("wtwind_run_forecast_upper_loss", "Upper edge of the forecast band", lambda r, s: s and s.band_hi),
    ("wtwind_run_score_w", "W-Twin warning score W (above 0: degradation building)",
     lambda r, s: s and s.W),
    ("wtwind_run_score_d", "W-Twin deviation D (standardized residual)", lambda r, s: s and s.D),
    ("wtwind_run_confidence_q", "W-Twin forecast confidence Q in [0, 1]", lambda r, s: s and s.Q),
)


class DaemonCollector(_Base):
    def __init__(self, table: RunTable, stats: Stats, *, max_series_runs: int = 1000,
                 ended_series_s: float = 900.0, clock: Callable[[], float] = time.time,
                 shard: str | None = None, budget=None) -> None:
        """``budget``: the daemon's config, for its memory accounting (``[budget]``,
        ``[runs]``); None: no accounting is exported."""
        self.budget = budget
        self.shard = shard
        self.table = table
        self.stats = stats
        self.max_series_runs = max_series_runs
        self.ended_series_s = ended_series_s
        self.clock = clock

    def describe(self):
        """Every family ``collect`` yields, by name and type (daemon/described.py)."""
        return described(
            counters=("wtwind_events_received", "wtwind_events_rejected", "wtwind_events_dropped",
                      "wtwind_loop_errors", "wtwind_emitters_evicted", "wtwind_http_refused",
                      "wtwind_alerts", "wtwind_run_emitter_dropped_events", "wtwind_scalars_dropped"),
            gauges=("wtwind_active_runs", "wtwind_known_runs", "wtwind_runs_over_series_cap",
                    *(name for name, _, _ in _RUN_GAUGES), "wtwind_run_status",
                    "wtwind_run_alert_active", "wtwind_run_alert_severity",
                    "wtwind_run_behind_reference", *TIMING_GAUGES,
                    *(("wtwind_memory_budget_bytes", "wtwind_budget_items") if self.budget else ())),
            infos=("wtwind_build", *(("wtwind_shard",) if self.shard is not None else ())))

    def collect(self):
        yield from self._self_metrics()
        if self.budget is not None:
            yield from self._budget_metrics()
        yield from self._run_metrics()

    def _budget_metrics(self):
        """The memory budget and what the bounded per-run parts hold against their limits."""
        cfg = self.budget
        yield GaugeMetricFamily("wtwind_memory_budget_bytes", "The memory wtwind is sized to stay under "
                                "([budget] memory_bytes)", value=cfg.budget.memory_bytes)
        runs = list(self.table)
        held = {"runs": len(runs), "emitter_ids": sum(len(r.marks.known()) for r in runs),
                "rewinds": sum(len(r.rewinds) for r in runs),
                "config_bytes": sum(len(r.config_json) for r in runs),
                "reference_points": sum(r.refs.points for r in runs if r.refs is not None),
                "scalar_series": self.table.scalar_budget.held}
        r = cfg.runs
        limit = {"runs": r.max_runs, "emitter_ids": r.max_runs * r.max_emitters_per_run,
                 "rewinds": r.max_runs * r.max_rewinds_kept,
                 "reference_points": r.max_reference_points,
                 "scalar_series": self.table.scalar_budget.max_series}  # configs: JSON of <= max_config_bytes of msgpack
        fam = GaugeMetricFamily("wtwind_budget_items", "What a bounded part holds (state=held) against its "
                                "limit (state=limit)", labels=["part", "state"])
        for part in held:
            fam.add_metric([part, "held"], held[part])
            if part in limit:
                fam.add_metric([part, "limit"], limit[part])
        yield fam

    def _self_metrics(self):
        info = InfoMetricFamily("wtwind_build", "wtwind build information")
        info.add_metric([], {"version": __version__})
        yield info
        if self.shard is not None:  # one series per daemon; joined on instance where needed
            shard = InfoMetricFamily("wtwind_shard", "This daemon's shard name ([shard] name)")
            shard.add_metric([], {"shard": self.shard})
            yield shard
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
        yield _counter("wtwind_scalars_dropped", "Scalar values dropped: their name was past a "
                       "run's or the daemon's cap of scalar series (daemon/scalars.py)", ["reason"],
                       self.table.scalar_budget.dropped)
        yield _counter("wtwind_http_refused", "HTTP requests refused (Host, Origin, token)", ["reason"],
                       self.stats.http_refused)
        # every (kind, severity) from 0, so that increase() sees the first alert of a kind
        fired = dict.fromkeys(((k, s) for k in KINDS for s in SEVERITIES), 0)
        fired.update(self.stats.alerts)
        yield _counter("wtwind_alerts", "Alerts fired", ["kind", "severity"], fired)

    def exported(self, r: RunState, now: float) -> bool:
        """Running, or ``held`` (ended with an alert firing, failed or killed) and ended
        not longer ago than ``ended_series_s``."""
        if r.status == "running":
            return True
        return r.held and now - (r.ended_at or 0.0) < self.ended_series_s

    def _run_metrics(self):
        now = self.clock()
        runs = sorted((r for r in self.table if self.exported(r, now)),
                      key=lambda r: r.last_seen, reverse=True)
        shown, hidden = runs[: self.max_series_runs], max(0, len(runs) - self.max_series_runs)
        yield GaugeMetricFamily("wtwind_runs_over_series_cap",
                                "Runs not exported because of max_series_runs",
                                value=hidden)
        for name, doc, get in _RUN_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=["run"])
            for r in shown:
                val = get(r, r.last_state)
                if val is not None:
                    fam.add_metric([r.run], float(val))
            yield fam
        dropped = CounterMetricFamily("wtwind_run_emitter_dropped_events",
                                      "Events the run's emitter reported dropping", labels=["run"])
        status = GaugeMetricFamily("wtwind_run_status", "1 for the run's status, 0 for the others",
                                   labels=["run", "status"])
        for r in shown:
            dropped.add_metric([r.run], r.emitter_dropped)
            for st in STATUSES:
                status.add_metric([r.run, st], float(r.status == st))
        yield dropped
        yield status
        yield from _alert_metrics(shown)
        yield _reference_metric(shown)
        yield from _timing_metrics(shown)


def _reference_metric(shown: list[RunState]) -> GaugeMetricFamily:
    """The gap to the reference the run is furthest behind, in units of that reference's
    progress by then (docs/REFERENCES.md); no series while not compared."""
    fam = GaugeMetricFamily("wtwind_run_behind_reference", "Gap to the reference run, in units of "
                            "the reference's progress (0.09: 9% of its progress behind; < 0: ahead)",
                            labels=["run", "reference"])
    for r in shown:
        v = r.refs.verdict() if r.refs is not None else None
        if v is not None and v.units == v.units:
            fam.add_metric([r.run, v.reference], v.units)
    return fam


TIMING_GAUGES = ("wtwind_run_step_slowdown_ratio", "wtwind_run_memory_bytes",
                 "wtwind_run_memory_forecast_seconds")


def _timing_metrics(shown: list[RunState]):
    """The run's time and memory (docs/DETECTION.md, "Throughput" and "Memory"): its step
    time over its baseline, the memory it last reported, and when the memory's growth
    reaches the device's total (no series while it does not grow toward it)."""
    slow = GaugeMetricFamily("wtwind_run_step_slowdown_ratio", "Step (or token) time over the "
                             "run's own baseline (1.0: as fast as it was)", labels=["run"])
    mem = GaugeMetricFamily("wtwind_run_memory_bytes", "Accelerator memory the trainer last "
                            "reported, bytes", labels=["run", "type"])
    eta = GaugeMetricFamily("wtwind_run_memory_forecast_seconds", "Seconds until the memory's "
                            "growth reaches the device total, at its present rate", labels=["run"])
    for r in shown:
        view = r.timing_view()
        if view is None:
            continue
        ratio, seconds = view
        if ratio is not None:
            slow.add_metric([r.run], ratio)
        if seconds is not None:
            eta.add_metric([r.run], seconds)
        for key, label in (("mem_allocated", "allocated"), ("mem_reserved", "reserved"),
                           ("mem_total", "total")):
            if r.timing is not None and key in r.timing:
                mem.add_metric([r.run, label], float(r.timing[key]))
    yield slow
    yield mem
    yield eta


def _alert_metrics(shown: list[RunState]):
    """One series per (run, kind) whatever the severity, so escalation keeps the series:
    ``wtwind_run_alert_active`` is 1 while it fires, ``wtwind_run_alert_severity`` says
    how bad (1 info, 2 warning, 3 critical). An ended run shows what fired at its end."""
    active = GaugeMetricFamily("wtwind_run_alert_active", "1 while an alert of this kind fires",
                               labels=["run", "kind"])
    severity = GaugeMetricFamily("wtwind_run_alert_severity",
                                 "Severity of the firing alert: 1 info, 2 warning, 3 critical",
                                 labels=["run", "kind"])
    for r in shown:
        firing = ({k: a.severity for k, a in r.policy.firing.items()} if r.status == "running"
                  else r.ended_firing)
        for kind, sev in sorted(firing.items()):
            active.add_metric([r.run, kind], 1.0)
            severity.add_metric([r.run, kind], float(SEVERITY_VALUE.get(sev, 0)))
    yield active
    yield severity


def _counter(name: str, doc: str, labels: list[str], values: dict) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, val in sorted(values.items()):
        fam.add_metric(list(key) if isinstance(key, tuple) else [key], val)
    return fam

