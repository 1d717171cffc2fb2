"""SpectralService: what the server owns to turn checkpoint events into health.

It holds the ``JobRunner``. ``submit(event)`` queues a ``checkpoint`` event; when its
job finishes (on the loop) the result is kept on the run (``RunState.spectral_result``),
the summary updates the run's spectral watch (``RunState.spectral``; both ride in the
run's snapshot), the ``spectral`` finding goes through the run's own alert policy (so
dedup/cooldown/lifecycle are the same as for every other kind) and a projected
checkpoint is announced to the trainer with ``projection_ready``. ``JobsCollector``
renders the job and per-run spectral families at scrape time, reading only.
"""

from __future__ import annotations

import functools
import time
from typing import Callable

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from wtwin.emitters import wire
from wtwin.detect.alert import Alert

from ..described import described
from ..spectral.health import SpectralSummary, SpectralWatch
from .config import JobsConfig
from .model import JobResult
from .runner import JobRunner

log = structlog.get_logger("wtwind.spectral")

_SUMMARY_GAUGES = (
    ("wtwind_run_spectral_alpha_mean", "Mean power-law alpha over the last analysed checkpoint's layers",
     lambda s: s.alpha_mean),
    ("wtwind_run_spectral_alpha_min", "Smallest layer alpha of the last analysed checkpoint", lambda s: s.alpha_min),
    ("wtwind_run_spectral_alpha_max", "Largest layer alpha of the last analysed checkpoint", lambda s: s.alpha_max),
    ("wtwind_run_spectral_layers_outside_band_ratio", "Fraction of layers with alpha outside the band",
     lambda s: s.frac_outside),
    ("wtwind_run_spectral_layers", "Layers analysed in the last checkpoint", lambda s: s.n_layers),
    ("wtwind_run_spectral_step", "Training step of the last analysed checkpoint", lambda s: s.step),
)


def watch_factory(config: JobsConfig) -> Callable[[], SpectralWatch]:
    """What builds each run's spectral watch (``RunTable(new_watch=...)``)."""
    return functools.partial(SpectralWatch, alpha_min=config.alpha_min, alpha_max=config.alpha_max,
                             trend_checkpoints=config.trend_checkpoints,
                             max_layers=config.max_layers_exported)


class SpectralService:
    def __init__(self, config: JobsConfig, table, *, publish: Callable[[Alert], None],
                 send: Callable[[bytes, bytes], None], changed: Callable[[object], None]) -> None:
        """``changed(run)``: the run's state changed (``Snapshots.mark``: written at the
        next flush)."""
        self.config = config
        self.changed = changed
        self.table = table
        self.publish = publish
        self.send = send
        self.runner = JobRunner(config, self.on_result)

    def submit(self, event: dict) -> str:
        want = event.get("want") or ("analyze",)
        if not self.config.enabled or not want:
            return "disabled"
        return self.runner.submit(event["run"], event)

    def on_result(self, result: JobResult) -> None:
        run = self.table.get(result.run)
        if run is None:  # expired while the job ran
            return
        alerts = run.observe_spectral(result.to_dict(), result.step, result.layers if result.ok else None,
                                      time.time())
        self.changed(run)
        if not result.ok:
            log.warning("spectral_job_failed", run=result.run, step=result.step, outcome=result.outcome,
                        reason=result.reason, error=result.error)
            return
        for alert in alerts:
            self.publish(alert)
        if result.projected_path:
            frame = wire.reply("projection_ready", run=result.run, step=result.step, path=result.projected_path,
                               source=result.path)
            for identity in run.identities.values():
                self.send(identity, frame)

    async def aclose(self) -> None:
        await self.runner.aclose()


class JobsCollector:
    """The job runner's families and each live run's spectral summary (at most
    ``max_series_runs`` runs, most recently active first). Reads only."""

    def __init__(self, runner: JobRunner, table, *, max_series_runs: int = 1000) -> None:
        self.runner = runner
        self.table = table
        self.max_series_runs = max_series_runs

    def describe(self):
        return described(counters=("wtwind_jobs",), gauges=(
            "wtwind_jobs_queue_depth", "wtwind_jobs_running", "wtwind_run_spectral_layer_alpha",
            *(name for name, _, _ in _SUMMARY_GAUGES)), histograms=("wtwind_job_duration_seconds",))

    def collect(self):
        stats = self.runner.stats()
        yield GaugeMetricFamily("wtwind_jobs_queue_depth", "Spectral jobs waiting for a worker",
                                value=stats.queue_depth)
        yield GaugeMetricFamily("wtwind_jobs_running", "Spectral jobs running now", value=stats.running)
        total = CounterMetricFamily("wtwind_jobs", "Spectral jobs by outcome", labels=["outcome"])
        for outcome, n in stats.counts.items():
            total.add_metric([outcome], n)
        yield total
        hist = HistogramMetricFamily("wtwind_job_duration_seconds", "Wall time of finished spectral jobs",
                                     unit="seconds")
        buckets = [(_le(edge), float(n)) for edge, n in stats.duration_buckets]
        hist.add_metric([], buckets, sum_value=stats.duration_sum)
        yield hist
        yield from self.run_families()

    def run_families(self):
        shown = sorted((r for r in self.table if r.spectral is not None and r.spectral.last is not None),
                       key=lambda r: r.last_seen, reverse=True)[: self.max_series_runs]
        summaries: dict[str, SpectralSummary] = {r.run: r.spectral.last for r in shown}
        for name, doc, get in _SUMMARY_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=["run"])
            for run, s in summaries.items():
                fam.add_metric([run], float(get(s)))
            yield fam
        layer = GaugeMetricFamily("wtwind_run_spectral_layer_alpha",
                                  "Power-law alpha per layer (first max_layers_exported layers)",
                                  labels=["run", "layer"])
        for run, s in summaries.items():
            for lname, alpha in s.layer_alpha:
                layer.add_metric([run, lname], float(alpha))
        yield layer


def _le(edge: float) -> str:
    return "+Inf" if edge == float("inf") else repr(float(edge))
