"""`RunMonitor`: every detector of one run, side by side, behind one small contract.

The daemon's run state only uses this contract:

- ``RunMonitor(preset="pretraining", **overrides)``
- ``update_loss(step, loss, lr=None, grad_norm=None) -> MonitorState``
- ``update_eval(step, metrics) -> MonitorState | None``
- ``snapshot() -> dict`` (msgpack/JSON-safe) and ``restore(snapshot)``

Arbitration (so that one problem gives one page and clean runs stay silent): a sustained
spike or a divergence takes precedence over the forecast's drift; a drift whose loss is
flat where the forecast falls is reported as ``plateau``; a ``plateau`` slowdown (the
decline collapsing) gives way to a drift or a divergence while one is active (a loss that
rises is a drift); benign recovered spikes are ``info``. A warning or critical verdict
then passes the `effect` gate (its deviation in loss units against the run's progress
and wobble: docs/DETECTION.md, "What it takes to page"); below it, it is ``info``.
Findings are emitted when a kind's (active, severity) changes.

Resumes: when the step goes back, the detectors are rewound to their state at the newest
rewind point before it (`rewind`), or started over when there is none, and a
``resume_jump`` finding says which.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

from .errors import ConfigError

from .base import REGISTRY
from .finding import Finding, MonitorState
from .presets import PRESET_PARAMS, PRESETS
from .rewind import RewindPoints

# a critical divergence has run away by at least this fraction of the run's progress
DIVERGENCE_OF_PROGRESS = 0.1

JUMPS = ("spike", "resume_jump")   # one point's jump, judged against `effect.jump_gate`
_RANK = {"info": 0, "warning": 1, "critical": 2}
GRAD_CONTEXT_STEPS = 200   # a grad-norm surge this recent is named in a loss page

SEVERITY = {"drift": "warning", "plateau": "warning", "divergence": "critical",
            "nonfinite": "critical", "overfit": "warning"}


def _build(preset: str, overrides: dict) -> dict:
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {PRESETS}, got {preset!r}")
    spec = {k: dict(v) for k, v in PRESET_PARAMS[preset].items()}
    main = "finetuning" if "finetuning" in spec else "forecast"
    for key, val in overrides.items():
        if isinstance(val, dict):
            if key not in spec:
                raise ConfigError(f"no detector {key!r} in preset {preset!r} (have {sorted(spec)})")
            spec[key].update(val)
        else:
            spec[main][key] = val
    dets = {name: REGISTRY[name](**kw) for name, kw in spec.items()}
    dets["nonfinite"] = REGISTRY["nonfinite"]()
    dets["gradnorm"] = REGISTRY["gradnorm"]()
    return dets


def _plateau_msg(pl, fc) -> str:
    if pl.rule == "frozen":
        return (f"loss frozen at exactly {pl.level!r} for {pl.repeats} points in a row: the logged "
                "loss stopped updating (often a NaN the logger hides)")
    if pl.rule == "no_learning":
        return (f"no learning: loss level {pl.level:.4g} fell only {pl.progress:.2%} since the "
                f"start ({pl.progress_z:.1f} times its point-to-point scatter)")
    if pl.rule == "slowdown":
        return (f"loss stopped improving at {pl.level:.4g}: its decline per log-step fell below "
                f"half its earlier pace ({pl.slow_z:.1f} standard errors)")
    return f"loss flat at {pl.level:.4g} while its forecast {fc.l_pred or 0:.4g} keeps falling"


class RunMonitor:
    def __init__(self, preset: str = "pretraining", **overrides) -> None:
        self.preset = preset
        self.overrides = overrides
        self._d = _build(preset, overrides)
        self._main = "finetuning" if "finetuning" in self._d else "forecast"
        self._emitted: dict[str, list] = {}
        self._alert = False        # any warning/critical kind active (follows _emitted)
        self._points = RewindPoints()   # recent detector states, for resumes (not persisted)
        self.peak_scores: dict[str, float] = {}   # diagnostics, not state: see ``_big``

    @property
    def detectors(self) -> dict:
        return dict(self._d)

    def _emit(self, out: list, kind: str, active: bool, severity: str, step: int, msg) -> None:
        """Append a finding when ``kind``'s (active, severity) changes; ``msg`` is a
        callable, so the message is only formatted when a finding is emitted."""
        prev = self._emitted.get(kind)
        if prev is None and not active:
            return
        if active and prev is not None and prev[0] and _RANK[severity] < _RANK[prev[1]]:
            return          # a kind that pages keeps paging until its detector is quiet
        if prev is not None and prev[0] == active and (prev[1] == severity or not active):
            return
        self._emitted[kind] = [active, severity]
        self._alert = any(v[0] and v[1] != "info" for v in self._emitted.values())
        text = f"{kind} resolved"
        if active:
            text = msg()
            if severity != "info" and (grad := self._d["gradnorm"].context(step, GRAD_CONTEXT_STEPS)):
                text += f" ({grad})"
        out.append(Finding(kind, severity, active, step, text))

    def update_loss(self, step: int, loss: float, lr: float | None = None,
                    grad_norm: float | None = None) -> MonitorState:
        d, out = self._d, []
        loss = float(loss)
        last = d["resume_jump"].last_step
        if last is not None and step < last:
            at = self._rewind(step)
            d = self._d
            rj = d["resume_jump"].resumed(step, loss, last)
            where = (f"detectors rewound to step {at}" if at is not None
                     else "detectors started over")
        else:
            rj, where = d["resume_jump"].update(step, loss), ""
        if grad_norm is not None:
            d["gradnorm"].update(step, grad_norm)
        nf = d["nonfinite"].update(step, loss)
        if rj.active:
            sev = rj.severity if rj.severity == "info" or self._big("resume_jump", abs(rj.jump)) else "info"
            self._emit(out, "resume_jump", True, sev, step, lambda: (
                f"step went back from {rj.from_step} to {step}; loss moved by {rj.jump:+.4g} "
                f"({where})"))
        elif "resume_jump" in self._emitted:
            self._emit(out, "resume_jump", False, "info", step, str)
        if nf.active or "nonfinite" in self._emitted:
            self._emit(out, "nonfinite", nf.active, "critical", step, lambda: (
                f"loss is {loss} at step {step} (first non-finite at step {nf.first_step})"))
        if nf.active:
            return MonitorState(step, loss, None, None, None, None, None, None, None, True, tuple(out))
        fc = d[self._main].update(step, loss, lr)
        sp = d["spike"].update(step, loss)
        dv = d["divergence"].update(step, loss)
        ri = d["rise"].update(step, loss)
        pl = d["plateau"].update(step, loss, fc.l_pred, fc.alert)
        d["overfit"].update_train(step, loss)
        if ri.active and lr is not None and fc.band_hi is not None:
            # lr known: a rise the schedule explains (the forecast rose by a quarter of
            # it, and the level is within the band) is no drift; a wide band alone is not
            # an explanation (it silenced every rise of a young forecast)
            if (ri.level <= fc.band_hi
                    and d["effect"].forecast_rise(fc.l_pred, lr) >= 0.25 * (ri.level - ri.best)):
                d["rise"].rebase()    # the schedule moved the loss: a new best from here
                ri = None
        judging = (fc.alert or dv.active or sp.active or (ri is not None and ri.active)
                   or (pl.active and pl.rule not in ("no_learning", "frozen")))
        d["effect"].feed(step, loss, judging, fc.l_pred, lr)
        self._arbitrate(out, step, loss, fc, sp, dv, pl, ri)
        if step >= self._points.next_at:
            self._points.take(step, d)
        return MonitorState(step, loss, fc.l_pred, fc.band_lo, fc.band_hi, fc.D, fc.Q, fc.T, fc.W,
                            self._alert, tuple(out) if out else ())

    def _big(self, kind: str, effect: float) -> bool:
        """Is a deviation of ``effect`` loss units large enough to page (`effect`)? Also
        keeps, per kind, the largest score seen while its detector was active
        (``peak_scores``: what the harness calibrates the gate on)."""
        ef, jump = self._d["effect"], kind in JUMPS
        score = ef.score(effect, jump)
        if score > self.peak_scores.get(kind, -math.inf):
            self.peak_scores[kind] = score
        return score > (ef.jump_gate if jump else ef.gate)

    def _size(self, effect: float) -> str:
        """The effect a page states, in loss units and against the run's own yardsticks."""
        st = self._d["effect"].state(0)
        share = f", {effect / st.progress:.1%} of the run's progress" if st.progress > 0 else ""
        return f" [{effect:+.3g}{share}]"

    def _rise(self, l_pred) -> float:
        """The deviation of a drift or a plateau in loss units: the level above its best,
        or above the forecast when there is one, whichever is larger. A forecast below
        ``best - progress`` (the run falling further than it has come so far: an
        extrapolation gone wrong, like an exponential law refitted across a 43,000-step
        gap that predicted 0.37 for a t5 loss at 1.8) counts for nothing."""
        ef = self._d["effect"]
        up = max(ef.level - ef.best, ef.fast_rise())
        if l_pred is None or l_pred < ef.best - ef.state(0).progress:
            return up
        return max(up, ef.level - l_pred)

    def _rewind(self, step: int) -> int | None:
        """Detectors as they stood at the newest rewind point before ``step`` (fresh ones
        when there is none); returns that point's step. The emitted kinds are kept, so a
        kind active before the resume and not at the point is resolved by the next update."""
        point = self._points.before(step)
        self._d = _build(self.preset, self.overrides)
        if point is None:
            return None
        for k, snap in point[1].items():
            self._d[k].restore(snap)
        return point[0]

    def _arbitrate(self, out, step, loss, fc, sp, dv, pl, ri) -> None:
        """Which kinds are active, at which severity. A detector's verdict pages only when
        its deviation is large enough (`effect`); below that it is ``info``."""
        emitted, emit, big = self._emitted, self._emit, self._big
        ef = self._d["effect"]
        dv_sev, up = "critical", dv.level - dv.best
        if dv.active and not (big("divergence", up)
                              and up > DIVERGENCE_OF_PROGRESS * ef.state(step).progress):
            dv_sev = "info"     # a small run-away is at most a drift
        if dv.active or "divergence" in emitted:
            emit(out, "divergence", dv.active, dv_sev, step, lambda: (
                 f"loss level {dv.level:.4g} ran away from its best {dv.best:.4g}" + self._size(up)))
        dv_page = dv.active and dv_sev == "critical"
        if sp.severity == "info":
            emit(out, "spike", True, "info", step,
                 lambda: f"benign spike of {sp.height:+.3g} at step {sp.spike_step}, recovered")
        elif sp.active or "spike" in emitted:
            sev = "warning" if not sp.active or big("spike", sp.height) else "info"
            emit(out, "spike", sp.active and not dv_page, sev, step, lambda: (
                f"loss {sp.height:+.3g} above its level since step {sp.spike_step}, not recovered"
                + self._size(sp.height)))
        stagnation = pl.active and pl.rule == "stagnation"
        drift = (fc.alert or (ri is not None and ri.active)) and not (stagnation or dv_page or sp.active)
        plateau = pl.active and not (pl.rule == "slowdown" and (drift or dv_page))  # a rise is a drift
        if plateau or "plateau" in emitted:
            sev = "warning"
            effect = max(self._rise(fc.l_pred), pl.shortfall)
            if plateau and pl.rule not in ("no_learning", "frozen") and not big("plateau", effect):
                sev = "info"
            emit(out, "plateau", plateau, sev, step, lambda: _plateau_msg(pl, fc) + (
                self._size(effect) if pl.rule not in ("no_learning", "frozen") else ""))
        if drift or "drift" in emitted:
            effect = self._rise(fc.l_pred if fc.alert else None)
            sev = "warning" if not drift or big("drift", effect) else "info"
            emit(out, "drift", drift, sev, step, lambda: (
                f"loss {loss:.4g} above its forecast {fc.l_pred or 0:.4g} "
                f"(band {fc.band_lo or 0:.4g}..{fc.band_hi or 0:.4g}, W={fc.W or 0:.1f})"
                if fc.alert or ri is None else f"smoothed loss {ri.level:.4g} rose above its best "
                f"{ri.best:.4g} (level score {ri.score:.1f}, jump CUSUM {ri.S:.0f}; noise units)")
                + self._size(effect))

    def update_eval(self, step: int, metrics: dict) -> MonitorState | None:
        val = next((metrics[k] for k in ("val_loss", "eval_loss", "loss") if k in metrics), None)
        if val is None:
            return None
        val, out = float(val), []
        if not math.isfinite(val):
            self._emit(out, "nonfinite", True, "critical", step,
                       lambda: f"validation loss is {val} at step {step}")
            return MonitorState(step=step, l_obs=val, alert=True, findings=tuple(out))
        ov = self._d["overfit"].update(step, val)
        self._emit(out, "overfit", ov.active, "warning", step, lambda: (
                   f"validation loss {val:.4g} is above its best {ov.best_val:.4g} "
                   "while the training loss still falls"))
        return MonitorState(step=step, l_obs=val, alert=self._alert, findings=tuple(out))

    def snapshot(self, copy: bool = True) -> dict:
        """Plain values; ``copy=False`` shares the detectors' live state with a caller that
        serializes it at once (see `Detector.snapshot`)."""
        return {"v": 1, "preset": self.preset, "overrides": dict(self.overrides),
                "emitted": {k: list(v) for k, v in self._emitted.items()},
                "detectors": {k: det.snapshot(copy) for k, det in self._d.items()}}

    def restore(self, snap: dict) -> None:
        if snap.get("v") != 1 or "detectors" not in snap:
            raise ConfigError("monitor snapshot is not version 1")
        self.__init__(snap["preset"], **snap.get("overrides", {}))
        self._emitted = {k: list(v) for k, v in snap["emitted"].items()}
        self._alert = any(v[0] and v[1] != "info" for v in self._emitted.values())
        for k, s in snap["detectors"].items():
            self._d[k].restore(s)


class WTwinMonitor(RunMonitor):
    """Seed-compatible in-process monitor: ``WTwinMonitor(preset).update(step, loss)``.

    >>> import random
    >>> rng = random.Random(0)
    >>> mon = WTwinMonitor(preset="pretraining")
    >>> caught = None
    >>> for t in range(1, 8001):
    ...     loss = 2.5 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05) + max(0.0, t - 5000) * 1e-4
    ...     if mon.update(t, loss).alert and caught is None:
    ...         caught = t
    >>> 5000 < caught < 6000
    True
    """

    def update(self, step: int, loss: float, lr: float | None = None) -> MonitorState:
        return self.update_loss(step, loss, lr)
