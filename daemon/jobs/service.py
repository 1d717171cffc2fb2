"""SpectralService: what the server owns to turn checkpoint events into health.

It holds the ``JobRunner`` and, per run, a ``SpectralWatch`` and the last result.
``submit(event)`` queues a ``checkpoint`` event; when its job finishes (on the loop)
the summary updates the run's metrics, the ``spectral`` finding goes through the
run's own alert policy (so dedup/cooldown/lifecycle are the same as for every other
kind) and a projected checkpoint is announced to the trainer with
``projection_ready``. ``collect()`` is a metrics provider for ``DaemonCollector``.
"""

from __future__ import annotations

import time
from typing import Callable

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from wtwin.emitters import wire
from wtwin.detect.alert import Alert

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


class SpectralService:
    def __init__(self, config: JobsConfig, table, *, publish: Callable[[Alert], None],
                 send: Callable[[bytes, bytes], None], max_series_runs: int = 1000,
                 changed: Callable[[str], None] = lambda run: None) -> None:
        """``changed(run)`` is called when a run's spectral state changed (the store
        snapshots it with the run: ``snapshot_run``/``restore_run``)."""
        self.config = config
        self.changed = changed
        self.table = table
        self.publish = publish
        self.send = send
        self.max_series_runs = max_series_runs
        self.runner = JobRunner(config, self.on_result)
        self.watches: dict[str, SpectralWatch] = {}
        self.last_result: dict[str, dict] = {}  # run -> JobResult.to_dict(), for the store/run page

    def submit(self, event: dict) -> str:
        want = event.get("want") or ("analyze",)
        if not self.config.enabled or not want:
            return "disabled"
        return self.runner.submit(event["run"], event)

    def on_result(self, result: JobResult) -> None:
        run = self.table.get(result.run)
        if run is None:  # expired while the job ran
            return
        self.last_result[result.run] = result.to_dict()
        self.changed(result.run)
        if not result.ok:
            log.warning("spectral_job_failed", run=result.run, step=result.step, outcome=result.outcome,
                        reason=result.reason, error=result.error)
            return
        if result.layers:
            self._observe_layers(run, result)
        if result.projected_path:
            frame = wire.reply("projection_ready", run=result.run, step=result.step, path=result.projected_path,
                               source=result.path)
            for identity in run.identities.values():
                self.send(identity, frame)

    def _observe_layers(self, run, result: JobResult) -> None:
        _, finding = self._watch(result.run).update(result.step, result.layers)
        alert = run.policy.apply(finding, time.time())
        if alert is not None:
            self.publish(alert)

    def snapshot_run(self, run: str) -> dict | None:
        """The run's spectral state (watch + last result), JSON-able, for the store."""
        watch, last = self.watches.get(run), self.last_result.get(run)
        if watch is None and last is None:
            return None
        return {"watch": watch.snapshot() if watch is not None else None, "last_result": last}

    def restore_run(self, run: str, state: dict) -> None:
        if state.get("watch") is not None:
            self._watch(run).restore(state["watch"])
        if state.get("last_result") is not None:
            self.last_result[run] = state["last_result"]

    def _watch(self, run: str) -> SpectralWatch:
        watch = self.watches.get(run)
        if watch is None:
            cfg = self.config
            watch = self.watches[run] = SpectralWatch(
                alpha_min=cfg.alpha_min, alpha_max=cfg.alpha_max, trend_checkpoints=cfg.trend_checkpoints,
                max_layers=cfg.max_layers_exported)
        return watch

    async def aclose(self) -> None:
        await self.runner.aclose()

    # -- metrics ----------------------------------------------------------------

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
        yield from self._run_families()

    def _run_families(self):
        live = {r.run: r for r in self.table}
        for run in [r for r in {*self.watches, *self.last_result} if r not in live]:  # expired runs
            self.watches.pop(run, None)
            self.last_result.pop(run, None)
        shown = sorted((r for r in self.watches if self.watches[r].last is not None),
                       key=lambda r: live[r].last_seen, reverse=True)[: self.max_series_runs]
        summaries: dict[str, SpectralSummary] = {r: self.watches[r].last for r in shown}
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
