"""Per-run state: the run's detectors, its latest values, and its alert lifecycle.

``RunState.observe(event, now)`` takes one validated wire event and returns the alert
transitions it caused (`run_table.RunTable` holds every live run). One asyncio loop owns
all of it: no locks.
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import structlog

from wtwin.detect import Finding, MonitorState, RunMonitor
from wtwin.detect.alert import Alert
from wtwin.detect.chance import chance_of
from wtwin.detect.policy import AlertPolicy
from wtwin.detect.replay import observe_eval, observe_loss
from wtwin.emitters.schema import TIMING
from wtwin.emitters.wire import KIND_PRESETS

from .ingest_marks import EmitterMarks
from .scalars import RunScalars, ScalarBudget
from .series import RunSeries, Spark

if TYPE_CHECKING:
    from .spectral.health import SpectralWatch

log = structlog.get_logger("wtwind.runs")
MAX_REWINDS_KEPT = 32
MAX_KIND_CHARS = 64      # run_start.kind, and a rewind's kind and checkpoint name, kept this long
MAX_EVAL_METRICS = 16    # eval metrics kept as the run's last values (the wire allows 64)


def _cut(value, limit: int):
    """A client's free text, kept at most ``limit`` characters."""
    return value[:limit] if isinstance(value, str) and len(value) > limit else value
NO_LR = object()  # a loss event without ``lr`` (``RunState.observe_loss``)


class RunState:
    def __init__(self, run: str, *, preset: str, cooldown_s: float, now: float, creator=None,
                 new_watch: Callable[[], "SpectralWatch"] | None = None, keep_history: bool = True,
                 max_kind_chars: int = MAX_KIND_CHARS, max_eval_metrics: int = MAX_EVAL_METRICS,
                 max_rewinds_kept: int = MAX_REWINDS_KEPT,
                 scalar_budget: ScalarBudget | None = None) -> None:
        """``new_watch`` builds the run's spectral watch when its first checkpoint result
        comes (``spectral_watch``), configured from ``[jobs]``; ``keep_history``: its
        series gather the whole history for the store (false without a store: nothing
        would take it). The ``max_*`` bound the free text a client may make the run keep
        (``[runs]``, docs/CONFIG.md); ``scalar_budget``: the daemon's bound on scalar
        series (daemon/scalars.py), shared by its runs."""
        self.max_kind_chars, self.max_eval_metrics = max_kind_chars, max_eval_metrics
        self.run = run
        self.preset = preset
        self.config_json = "{}"   # the run_start config, kept as JSON: see ``config``
        self.kind: str | None = None   # run_start.kind: "pretraining", "finetuning", ...
        self.preset_from = "default"   # or "run_start.preset", "run_start.kind"
        self.status = "running"
        self.first_seen = now
        self.last_seen = now           # any event, heartbeats included
        self.last_progress = now       # loss/eval events only: what "stalled" means
        self.step: int | None = None
        self.loss: float | None = None
        self.lr: float | None = None
        self.last_state: MonitorState | None = None
        self.last_eval: dict[str, float] = {}
        self.timing: dict | None = None   # the last value of each field of time and memory
        self.marks = EmitterMarks()              # per emitter id: seq mark, identity, last event
        self.owner: str | None = None            # principal the run is bound to (``claim``)
        self.creator = creator                   # client charged for the run (admission.py)
        self.events = 0                          # events processed (duplicates excluded)
        self.emitter_dropped = 0
        self._monitor: RunMonitor | None = None   # built on first use: see ``monitor``
        self.frozen = None             # a stored detector snapshot not yet restored (store/)
        self._series: RunSeries | None = None
        self.scalars: RunScalars | None = None   # built at the first scalar event
        self.scalar_budget = scalar_budget
        # its series of time and memory: counted in the scalar budget, or found no room (logged)
        self._timing_taken = self._timing_refused = False
        self.history: dict | None = None   # the stored history's envelopes (store/codec.py)
        # restored from the store: its plot series hold only what came since (the page
        # puts the stored history in front: web/__init__.py)
        self.restored = False
        self.keep_history = keep_history
        self.policy = AlertPolicy(run, cooldown_s=cooldown_s)
        self.stalled = False
        self.rewinds: deque[dict[str, Any]] = deque(maxlen=max_rewinds_kept)  # trainer audit
        self._announced: dict[str, Any] | None = None   # a rewind whose resumed step is due
        self.spark = Spark()           # the whole run's loss in 64 points (stored, listed)
        self.ended_at: float | None = None
        self.ended_firing: dict[str, str] = {}   # kind -> severity of what fired at run_end
        self.nonnegative = True                  # every loss so far >= 0 (cross-entropy-like)
        self.refs = None   # a references.RunReference when run_start named references or a group
        # spectral health (jobs/service.py): the watch over analysed checkpoints, the last job
        self.spectral: SpectralWatch | None = None
        self.spectral_result: dict[str, Any] | None = None   # JobResult.to_dict()
        self._new_watch = new_watch

    @property
    def config(self) -> dict[str, Any]:
        """The run's config. Held as compact JSON (what the store writes), decoded when a
        page asks: a 16 KiB config as Python objects can take 10x that (RELIABILITY.md)."""
        return json.loads(self.config_json)

    @config.setter
    def config(self, value: dict[str, Any]) -> None:
        self.config_json = json.dumps(value, default=str, separators=(",", ":"))

    @property
    def identities(self) -> dict[str, bytes]:
        """Emitter id -> the ROUTER identity its replies and alerts go to (read only)."""
        return self.marks.identities

    def claim(self, principal: str) -> None:
        """Bind a run that has no owner yet to ``principal`` (admission.py)."""
        self.owner = principal

    @property
    def held(self) -> bool:
        """An ended run whose series stay for a while: it ended with an alert firing, or
        it failed or was killed (``runs.ended_series_s``)."""
        return self.status != "running" and (bool(self.ended_firing) or self.status in ("failed", "killed", "stopped"))

    @property
    def monitor(self) -> RunMonitor:
        """The run's detectors, built on first use, so that restoring 1k stored runs at
        startup costs a few milliseconds: a waiting snapshot is restored then (``thaw``)."""
        if self._monitor is None:
            self.thaw()
        return self._monitor

    @monitor.setter
    def monitor(self, monitor: RunMonitor) -> None:
        self._monitor, self.frozen = monitor, None

    def freeze(self, frozen) -> None:
        """Drop the detectors; ``frozen.load()`` gives the snapshot to restore at first use."""
        self._monitor, self.frozen = None, frozen

    @property
    def thawed(self) -> bool:
        return self._monitor is not None

    def thaw(self) -> None:
        """Build the detectors and restore ``frozen`` into them (it has ``load() -> dict``).

        A snapshot that does not restore leaves fresh detectors and raises."""
        frozen, self.frozen = self.frozen, None
        self._monitor = RunMonitor(self.preset)
        if frozen is not None:
            try:
                self._monitor.restore(frozen.load())
            except Exception:
                self._monitor = RunMonitor(self.preset)
                raise

    def spectral_watch(self) -> "SpectralWatch":
        """The run's spectral watch, built on first use."""
        if self.spectral is None:
            if self._new_watch is None:
                from .spectral.health import SpectralWatch

                self._new_watch = SpectralWatch
            self.spectral = self._new_watch()
        return self.spectral

    @property
    def series(self) -> RunSeries:
        """Bounded, decimated plot series for the run page (built on first use)."""
        if self._series is None:
            self._series = RunSeries(history=self.history, keep=self.keep_history)
        return self._series

    def timing_view(self) -> tuple[float | None, float | None] | None:
        """For /metrics, read only: the step time over its baseline (None before one) and
        the seconds until memory reaches the device total (None: not on its way); None
        while the run's detectors are not in memory."""
        mon = self._monitor
        if mon is None:
            return None
        dets = mon.detectors
        tp, mem = dets.get("throughput"), dets.get("memory")
        ratio = tp.slowdown if tp is not None and tp.based else None
        eta = mem.eta_s if mem is not None and math.isfinite(mem.eta_s) else None
        return ratio, eta

    def observe(self, ev: dict, now: float) -> list[Alert]:
        """One admitted event: counted, then its kind's handler; the alert transitions."""
        self.events += 1
        self.last_seen = now
        handler = _HANDLERS[ev["type"]]
        return handler(self, ev, now)

    def _on_loss(self, ev: dict, now: float) -> list[Alert]:
        timing = {k: ev[k] for k in TIMING if k in ev} or None
        if timing is not None:      # kept field by field: memory comes every N steps only
            if self.timing is None:
                self.timing = {}
            self.timing.update(timing)
        return self._loss(ev["step"], ev["loss"], ev.get("lr", NO_LR), ev.get("grad_norm"),
                          ev.get("tokens"), now, ev.get("ts"), timing)

    def observe_loss(self, step: int, loss: float, lr: float | None, grad_norm: float | None,
                     tokens: float | None, now: float, ts: float | None = None) -> list[Alert]:
        """``observe`` of a loss event, from its values (``lr`` is ``NO_LR`` when the
        event has none: the run's last LR carries on in its series). No event dict: the
        daemon calls it with a batch's columns (``daemon/ingest.py``)."""
        self.events += 1
        return self._loss(step, loss, lr, grad_norm, tokens, now, ts, None)

    def _loss(self, step: int, loss: float, lr, grad_norm, tokens, now: float, ts=None,
              timing=None) -> list[Alert]:
        self.last_seen = self.last_progress = now
        loss = float(loss)
        self.step, self.loss = step, loss
        if loss < 0:
            self.nonnegative = False
        if lr is NO_LR:
            lr = None
        else:
            self.lr = lr
        monitor = self._monitor
        if self._announced is not None:  # the first loss after a rewind
            monitor = _Announced(self)
        elif monitor is None:
            monitor = self.monitor
        state, out = observe_loss(monitor, self.policy, step, loss, lr, grad_norm, now, ts, tokens,
                                  timing)
        self.last_state = state
        series = self._series if self._series is not None else self.series
        series.add_loss(step, loss, state, self.lr, grad_norm, tokens, now if ts is None else ts)
        if timing is not None and self._timing_room():
            series.add_timing(step, timing)   # only events with fields of time or memory
        self.spark.add(step, loss)
        if self.refs is not None:   # daemon/references.py: one tracker feed a loss
            out += self.refs.update(self.policy, step, loss, lr, tokens, now)
        if self.stalled:
            out += self.check_stall(now, math.inf)
        return out

    def _on_eval(self, ev: dict, now: float) -> list[Alert]:
        self.last_progress = now
        metrics = ev["metrics"]
        self.last_eval = (dict(metrics) if len(metrics) <= self.max_eval_metrics
                          else dict(list(metrics.items())[: self.max_eval_metrics]))
        self.series.add_eval(ev["step"], self.last_eval)
        return observe_eval(self.monitor, self.policy, ev["step"], ev["metrics"], now)[1]

    def _timing_room(self) -> bool:
        """Has the daemon room for this run's series of time and memory (`ScalarBudget`)?
        Without, the row is dropped (counted) and the run's first drop logged."""
        if self._timing_taken or self.scalar_budget is None:
            return True
        if self.scalar_budget.take_timing(self):     # held while this run is in memory
            self._timing_taken = True
            return True
        if not self._timing_refused:
            self._timing_refused = True
            log.warning("scalar_dropped", run=self.run, reason="timing_total",
                        max_series=self.scalar_budget.max_series)
        return False

    def _on_scalar(self, ev: dict, now: float) -> list[Alert]:
        if self.scalars is None:
            self.scalars = RunScalars(self.run, self.scalar_budget, (self.history or {}).get("scalars"),
                                      keep=self.keep_history)
        self.scalars.add(ev["step"], ev["name"], ev["value"])
        return []

    def _on_run_start(self, ev: dict, now: float) -> list[Alert]:
        self.config = dict(ev.get("config") or {})
        self.kind = _cut(ev.get("kind", self.kind), self.max_kind_chars)
        named = ev.get("preset")
        preset = named or KIND_PRESETS.get(self.kind or "")  # a named preset wins
        chance = chance_of(self.config)     # the loss at chance, from the classes it names
        if self.step is None and ((preset and preset != self.preset) or chance):
            try:
                self.monitor = RunMonitor(preset or self.preset,
                                          **({"chance": {"level": chance}} if chance else {}))
                self.preset = preset or self.preset
            except ValueError:
                pass  # unknown preset: keep the daemon's default
        if preset and preset == self.preset:
            self.preset_from = "run_start.preset" if named else "run_start.kind"
        self.status = "running"
        self.ended_at, self.ended_firing = None, {}
        return []

    def _on_heartbeat(self, ev: dict, now: float) -> list[Alert]:
        self.emitter_dropped = max(self.emitter_dropped, int(ev.get("dropped") or 0))
        return []

    def _on_run_end(self, ev: dict, now: float) -> list[Alert]:
        self.status = ev.get("status") or "completed"
        self.ended_at = now
        self.ended_firing = {kind: a.severity for kind, a in self.policy.firing.items()}
        return self.policy.resolve_all(self.step or 0, now, f"run ended ({self.status})")

    def _on_checkpoint(self, ev: dict, now: float) -> list[Alert]:
        """The detectors hear of it (a memory page names the last checkpoint); the server
        hands it to the job runner."""
        self.monitor.checkpoint(ev["step"])
        return []

    def _on_rewind(self, ev: dict, now: float) -> list[Alert]:
        """A trainer-side `Rewind` ran: keep and log its audit record. The loss events
        that follow go back in step, which the detectors already treat as a resume."""
        rec = {"at": now, "step": ev["step"], "from_step": ev["from_step"],
               "kind": _cut(ev.get("kind"), self.max_kind_chars), "lr_scale": ev.get("lr_scale"),
               "count": ev.get("count"),
               "checkpoint": _cut(os.path.basename(ev["checkpoint"]), self.max_kind_chars)
               if ev.get("checkpoint") else None}
        self.rewinds.append(rec)
        self._announced = rec
        log.info("run_rewound", run=self.run, _client=self.creator,
                 **{k: v for k, v in rec.items() if k != "at"})
        return []

    def observe_spectral(self, result: dict[str, Any], step: int, layers, now: float) -> list[Alert]:
        """A finished spectral job (``JobResult.to_dict()``): kept as the run's last; its
        ``layers`` (None for a failed job) update the spectral watch, whose finding goes
        through the run's alert policy."""
        self.spectral_result = result
        if not layers:
            return []
        _, finding = self.spectral_watch().update(step, layers)
        alert = self.policy.apply(finding, now)
        return [alert] if alert else []

    def check_stall(self, now: float, stall_after_s: float) -> list[Alert]:
        """Called on the daemon's tick: a running run with no progress is stalled."""
        silent = now - self.last_progress
        stalled = self.status == "running" and silent >= stall_after_s
        if stalled == self.stalled:
            return []
        self.stalled = stalled
        msg = (f"no loss or eval events for {silent:.0f} s" if stalled
               else "events resumed")
        a = self.policy.apply(Finding("stalled", "warning", stalled, self.step or 0, msg), now)
        return [a] if a else []


class _Announced:
    """The run's monitor for the first loss after a ``rewind`` event: the resume the
    trainer announced is no surprise, so its ``resume_jump`` is info (the detectors
    compare with their nearest rewind point, often some hundred steps older than the
    checkpoint, so a healthy rewind can read as a jump). Everything else is unchanged."""

    def __init__(self, run: RunState) -> None:
        self.monitor, self.rec = run.monitor, run._announced
        run._announced = None

    def update_loss(self, step, loss, *args) -> MonitorState:
        state = self.monitor.update_loss(step, loss, *args)
        rec = self.rec
        if step > rec["from_step"] or not state.findings:
            return state
        return state._replace(findings=tuple(
            f._replace(severity="info", message=f"{f.message}; announced by the trainer: rewind "
                       f"from step {rec['from_step']} to {rec['step']}")
            if f.kind == "resume_jump" and f.active else f for f in state.findings))


_HANDLERS = {
    "loss": RunState._on_loss,
    "eval": RunState._on_eval,
    "run_start": RunState._on_run_start,
    "heartbeat": RunState._on_heartbeat,
    "run_end": RunState._on_run_end,
    "checkpoint": RunState._on_checkpoint,
    "rewind": RunState._on_rewind,
    "scalar": RunState._on_scalar,
}

