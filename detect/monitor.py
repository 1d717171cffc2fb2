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

The arbitration, the gate and the findings' bookkeeping are the base class's
(`arbiter.Arbiter`); this module builds the detectors, runs them per update, rewinds them
on a resume and snapshots them.

Per update it calls each detector's ``observe()`` and reads the attributes it needs: no
state object per detector; the one `MonitorState` it returns is built as a plain tuple.
Compiled (docs/COMPILED.md), its references to the detectors are typed (``arbiter.pxd``)
and those calls and reads are C.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import functools
import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from .arbiter import _BIT, _NO_LEARNING, Arbiter
from .base import NO_STEP as _NO_STEP, REGISTRY
from .errors import ConfigError
from .finding import MonitorState
from .presets import PRESET_PARAMS, PRESETS
from .recovery import Recovery
from .rewind import RewindPoints

if not cython.compiled:        # compiled: C ints, cimported in monitor.pxd
    from .arbiter import _NF, _RJ

NO_STEP = cython.declare(cython.longlong, _NO_STEP)

SEVERITY = {"drift": "warning", "plateau": "warning", "divergence": "critical",
            "nonfinite": "critical", "overfit": "warning"}

_new = tuple.__new__        # a MonitorState without the NamedTuple's Python-level __new__


@cython.locals(i=cython.Py_ssize_t)
def _state(fields: tuple):
    """A `MonitorState` from its fields. Compiled, the tuple subtype is allocated and
    filled in place (``tuple.__new__`` parses its arguments and copies the tuple: a
    tenth of an update's instructions)."""
    st = PyType_GenericAlloc(MonitorState, 11)     # noqa: F821  (the C API: monitor.pxd)
    for i in range(11):
        v = fields[i]
        Py_INCREF(v)                               # noqa: F821  (SET_ITEM steals it)
        PyTuple_SET_ITEM(st, i, v)                 # noqa: F821
    return st


if not cython.compiled:     # pure build: tuple.__new__, called from C
    _state = functools.partial(_new, MonitorState)     # noqa: F811


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
    dets["collapse"] = REGISTRY["collapse"]()
    return dets


def _obvious_msg(nf, step, loss) -> str:
    """The page of a `nonfinite` verdict (``nf.reason``), or the info of one bad grad norm."""
    r = nf.reason
    if r == "loss":
        return f"loss is {loss} at step {step} (first non-finite at step {nf.first_step})"
    since = nf.grad_since
    if r == "stuck":
        what = "exactly 0.0" if loss == 0.0 else f"frozen at {loss!r}"
        return (f"loss is {what} at step {step} while the grad norm is not finite (since step "
                f"{since}): the weights are probably NaN and the logger hides it")
    if r == "grad":
        return (f"grad norm not finite on {nf.grad_count} logged steps in a row since step "
                f"{since}: the optimizer is not updating (or the weights are NaN)")
    return (f"grad norm not finite at step {step} (one step: an fp16 loss scaler skipping an "
            "overflow does this; it pages if it repeats)")


@cython.cclass
class RunMonitor(Arbiter):
    def __init__(self, preset: str = "pretraining", **overrides) -> None:
        self.preset = preset
        self.overrides = overrides
        self._setup(_build(preset, overrides))
        self._emitted = {}
        self._kinds = 0            # _BIT of each kind in _emitted
        self._alert = False        # any warning/critical kind active (follows _emitted)
        self._out = []             # the findings of the update in progress (`_push`)
        self._rec = Recovery()     # the band each page of the loss level left (`recovery`)
        self._held = self._rec.held
        self._points = RewindPoints()   # recent detector states, for resumes (not persisted)
        self._next_at = self._points.next_at
        self.peak_scores = {}      # diagnostics, not state: see ``_big``
        self._dv_at = math.nan     # divergence's excursion when a shift explained it (not state)
        self._pl_mode = 0          # the slowdown episode paged as: 1 plateau, 2 drift (not state)

    def _setup(self, d: dict) -> None:
        """Hold the detectors, and a typed reference to each one the per-event path calls."""
        self._d = d
        self._main = "finetuning" if "finetuning" in d else "forecast"
        self._rj, self._nf, self._gn = d["resume_jump"], d["nonfinite"], d["gradnorm"]
        self._co = d["collapse"]
        self._sp, self._dv, self._ri = d["spike"], d["divergence"], d["rise"]
        self._fc, self._pl, self._ef, self._ov = (
            d[self._main], d["plateau"], d["effect"], d["overfit"])

    @property
    def detectors(self) -> dict:
        return dict(self._d)

    @cython.locals(x=cython.double, s=cython.longlong, last=cython.longlong,
                   fc_alert=cython.bint, rising=cython.bint, explained=cython.bint,
                   pl_active=cython.bint, judging=cython.bint, on=cython.bint)
    def update_loss(self, step: int, loss: float, lr: float | None = None,
                    grad_norm: float | None = None) -> MonitorState:
        out = self._out         # this update's findings (`_push`): one list, emptied here
        if out:
            del out[:]
        loss = float(loss)
        if lr is not None and lr < 0:
            lr = None       # no schedule has one (the laws take its log): read as unknown
        x = loss
        s = step
        last = self._rj._last_step
        where = ""
        at = None
        if last != NO_STEP and s < last:
            at = self._rewind(s)
            self._rj.observe_resumed(s, x, last)
        else:
            self._rj.observe(s, x)
        nf = self._nf
        if grad_norm is not None:
            grad_norm = float(grad_norm)
            self._gn.observe(s, grad_norm)
        nf.observe(s, x, grad_norm)
        rj = self._rj
        sev: str
        if rj.active:
            sev = rj.severity
            if not (sev == "info" or self._big("resume_jump", abs(rj.jump))):
                sev = "info"
            if self._due("resume_jump", True, sev):
                where = (f"detectors rewound to step {at}" if at is not None
                         else "detectors started over")
                self._push("resume_jump", True, sev, step,
                           f"step went back from {rj.from_step} to {step}; loss moved by "
                           f"{rj.jump:+.4g} ({where})")
        elif self._kinds & _RJ and self._due("resume_jump", False, "info"):
            self._push("resume_jump", False, "info", step, "")
        on = nf.active or nf.grad_bad
        if on or self._kinds & _NF:
            sev = "critical" if nf.active else "info"
            if self._due("nonfinite", on, sev):
                self._push("nonfinite", on, sev, step, _obvious_msg(nf, step, loss) if on else "")
        if nf.blown and self._due("divergence", True, "critical"):    # resolved by `_arbitrate`
            self._push("divergence", True, "critical", step,
                       f"loss {loss:.4g} is {abs(loss) / nf._ref:.3g} times the largest loss of the "
                       f"run's first {nf._n_ref} points ({nf._ref:.4g}): it blew up")
        if nf.active or nf.blown:
            return _state((step, loss, None, None, None, None, None, None, None, True, tuple(out)))
        fc = self._fc
        fc.observe(step, loss, lr)
        sp = self._sp
        dv = self._dv
        ri = self._ri
        sp.observe(s, x)
        dv.observe(s, x)
        ri.observe(s, x)
        self._co.observe(s, x)
        l_pred = fc.l_pred
        alert = fc.alert
        fc_alert = alert
        pl = self._pl
        pl.observe(s, x, l_pred, fc_alert)
        self._ov.update_train(s, x)
        rising = ri.active     # False once the schedule explained the rise
        explained = False
        if rising and lr is not None:
            band_hi = fc.band_hi
            # lr known: a rise the schedule explains (the forecast rose by a quarter of
            # it, and the level is within the band) is no drift; a wide band alone is not
            # an explanation (it silenced every rise of a young forecast)
            if (band_hi is not None and ri.level <= band_hi
                    and self._ef.forecast_rise(l_pred, lr) >= 0.25 * (ri.level - ri.best)):
                ri.rebase()    # the schedule moved the loss: a new best from here
                rising, explained = False, True
        pl_active = pl.active
        judging = (fc_alert or dv.active or sp.active or rising
                   or (pl_active and pl.rule not in _NO_LEARNING))
        self._ef.feed(step, loss, judging, l_pred, lr)
        self._arbitrate(step, loss, fc, pl, fc_alert, pl_active, rising, explained)
        if self._held:          # a page of the loss level waits for it to come back
            self._rec.observe(x)
            self._escalate(step)
        if s >= self._next_at:
            self._points.take(step, self._d)
            self._next_at = self._points.next_at
        return _state((step, loss, l_pred, fc.band_lo, fc.band_hi, fc.D, fc.Q, fc.T, fc.W,
                       self._alert, tuple(out) if out else ()))

    def _rewind(self, step: int):
        """Detectors as they stood at the newest rewind point before ``step`` (fresh ones
        when there is none); returns that point's step. The emitted kinds are kept, so a
        kind active before the resume and not at the point is resolved by the next update."""
        point = self._points.before(step)
        self._next_at = self._points.next_at
        self._setup(_build(self.preset, self.overrides))
        if point is None:
            return None
        for k, snap in point[1].items():
            self._d[k].restore(snap)
        return point[0]

    def update_eval(self, step: int, metrics: dict) -> MonitorState | None:
        val = next((metrics[k] for k in ("val_loss", "eval_loss", "loss") if k in metrics), None)
        if val is None:
            return None
        val, out = float(val), []
        self._out = out
        if not math.isfinite(val):
            if self._due("nonfinite", True, "critical"):
                self._push("nonfinite", True, "critical", step,
                           f"validation loss is {val} at step {step}")
            return MonitorState(step=step, l_obs=val, alert=True, findings=tuple(out))
        ov = self._ov
        ov.observe(step, val)
        if self._due("overfit", ov.active, "warning"):
            self._push("overfit", ov.active, "warning", step,
                       f"validation loss {ov.val_mean:.4g} (mean of its last {ov.span} evals) "
                       f"has stood above its best {ov.best_val:.4g} by more than {ov.margin:.3g} "
                       f"for {ov.above} evals in a row while the training loss still falls"
                       if ov.active else "")
        return MonitorState(step=step, l_obs=val, alert=self._alert, findings=tuple(out))

    def snapshot(self, copy: bool = True) -> dict:
        """Plain values; ``copy=False`` shares the detectors' live state with a caller that
        serializes it at once (see `Detector.snapshot`)."""
        return {"v": 1, "preset": self.preset, "overrides": dict(self.overrides),
                "emitted": {k: list(v) for k, v in self._emitted.items()},
                "recovery": self._rec.snapshot(),
                "detectors": {k: det.snapshot(copy) for k, det in self._d.items()}}

    def restore(self, snap: dict) -> None:
        if snap.get("v") != 1 or "detectors" not in snap:
            raise ConfigError("monitor snapshot is not version 1")
        self.__init__(snap["preset"], **snap.get("overrides", {}))
        self._emitted = {k: list(v) for k, v in snap["emitted"].items()}
        for k in self._emitted:
            self._kinds |= _BIT.get(k, 0)
        self._alert = any(v[0] and v[1] != "info" for v in self._emitted.values())
        self._rec.restore(snap.get("recovery", {}))
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
