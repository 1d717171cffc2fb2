"""`RunMonitor`: every detector of one run, side by side, behind one small contract.

The daemon's run state only uses this contract:

- ``RunMonitor(preset="pretraining", **overrides)``
- ``update_loss(step, loss, lr=None, grad_norm=None, ts=None, tokens=None, timing=None)
  -> MonitorState`` (``ts``: the event's send time; ``tokens``: seen so far; ``timing``:
  None, or the loss event's other fields of time and memory by their wire names, `TIMING`)
- ``update_eval(step, metrics) -> MonitorState | None``
- ``snapshot() -> dict`` (msgpack/JSON-safe) and ``restore(snapshot)``

It builds the detectors of its preset from the registry (`presets`, `base.REGISTRY`) and
feeds each one a `base.Point` per update, at the stage its class names (``FEED``:
``first``, ``level``, ``trend``, ``last``, `base.STAGES`); a detector added to a preset is
fed without a line here. What each update emits is decided by the named rules (`rules`)
over the detectors' verdicts, with the bookkeeping of the `arbiter.Arbiter` the monitor
owns. Findings are emitted when a kind's (active, severity) changes.

Resumes: when the step goes back, the detectors are rewound to their state at the newest
rewind point before it (`rewind`), or started over when there is none, and a
``resume_jump`` finding says which.

Compiled (docs/COMPILED.md), its references to the arbiter, the point and the detectors
are typed (``monitor.pxd``), and the feeding and the rules are C calls.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from .arbiter import Arbiter
from .base import NO_STEP as _NO_STEP, REGISTRY, STAGES, Detector, Point
from .errors import ConfigError
from .finding import MonitorState
from .presets import EVERY_RUN, PRESET_PARAMS, PRESETS
from .rewind import RewindPoints

if not cython.compiled:        # compiled: C functions, cimported in monitor.pxd
    from .rules import evaluation, judge, judging, obvious, resume, schedule

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
_NAN = cython.declare(cython.double, math.nan)

SEVERITY = {"drift": "warning", "plateau": "warning", "divergence": "critical",
            "nonfinite": "critical", "overfit": "warning", "frozen_loader": "critical",
            "chance": "critical", "early_rise": "critical"}
LEGACY = {"collapse": "frozen_loader"}    # snapshot keys of detectors since renamed
# a loss event's fields of time and memory (emitters/schema.py) -> the `Point`'s fields
TIMING = {"step_time_s": "step_time", "data_wait_s": "data_wait",
          "mem_allocated": "mem_alloc", "mem_reserved": "mem_reserved",
          "mem_total": "mem_total", "gpus": "gpus", "phase": "phase"}

_new = tuple.__new__        # a MonitorState without the NamedTuple's Python-level __new__


def _state(step, l_obs, l_pred, band_lo, band_hi, D, Q, T, W, alert, findings):
    """A `MonitorState` from its fields. Compiled, the tuple subtype is allocated and
    filled in place from the C call's arguments (``tuple.__new__`` parses its arguments
    and copies a tuple of them: a tenth of an update's instructions; a tuple to pass
    them in is another allocation)."""
    st = PyType_GenericAlloc(MonitorState, 11)     # noqa: F821  (the C API: monitor.pxd)
    _put(st, 0, step)
    _put(st, 1, l_obs)
    _put(st, 2, l_pred)
    _put(st, 3, band_lo)
    _put(st, 4, band_hi)
    _put(st, 5, D)
    _put(st, 6, Q)
    _put(st, 7, T)
    _put(st, 8, W)
    _put(st, 9, alert)
    _put(st, 10, findings)
    return st


def _put(st, i: int, v) -> None:
    """``st[i] = v`` of a tuple being built (compiled only)."""
    Py_INCREF(v)                               # noqa: F821  (SET_ITEM steals it)
    PyTuple_SET_ITEM(st, i, v)                 # noqa: F821


def _fields_state(*fields):
    """The pure build's `_state`: ``tuple.__new__`` of the fields."""
    return _new(MonitorState, fields)


if not cython.compiled:
    _state = _fields_state      # noqa: F811


def _build(preset: str, overrides: dict) -> dict:
    """The detectors of ``preset`` (and `presets.EVERY_RUN`'s), by name, from the registry."""
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {PRESETS}, got {preset!r}")
    spec = {k: dict(v) for k, v in PRESET_PARAMS[preset].items()}
    main = "finetuning" if "finetuning" in spec else "forecast"
    spec.update({k: dict(v) for k, v in EVERY_RUN.items() if k not in spec})
    for key, val in overrides.items():
        if isinstance(val, dict):
            if key not in spec:
                raise ConfigError(f"no detector {key!r} in preset {preset!r} (have {sorted(spec)})")
            spec[key].update(val)
        else:
            spec[main][key] = val
    return {name: REGISTRY[name](**kw) for name, kw in spec.items()}


def stages(d: dict) -> list:
    """The detectors of ``d``, one list per stage of `base.STAGES`, in ``d``'s order."""
    for name, det in d.items():
        if type(det).FEED not in STAGES:
            raise ConfigError(f"detector {name!r} names no stage an update feeds "
                              f"(FEED {type(det).FEED!r}, not one of {STAGES})")
        if not isinstance(det, Detector):       # `_feed` calls it as one, unchecked
            raise ConfigError(f"detector {name!r} is no Detector ({type(det).__name__})")
    return [[det for det in d.values() if type(det).FEED == stage] for stage in STAGES]


def _timing(p, timing: dict) -> None:
    """The update's fields of time and memory (`TIMING`), NaN where it has none."""
    _untimed(p)
    p.timed = True
    for k, v in timing.items():
        if v is not None:
            setattr(p, TIMING[k], int(v) if k in ("gpus", "phase") else float(v))


def _untimed(p) -> None:
    p.step_time = p.data_wait = _NAN
    p.mem_alloc = p.mem_reserved = p.mem_total = _NAN
    p.gpus = p.phase = NO_STEP
    p.timed = False


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(i=cython.Py_ssize_t)
def _feed(dets: list, p) -> None:
    """Each detector of a stage sees the point: a C call each, by index, the list's items
    taken as the `Detector` that `stages` made sure they are (no type test per call)."""
    for i in range(len(dets)):
        cython.cast(Detector, dets[i]).see(p)


@cython.cclass
class RunMonitor:
    def __init__(self, preset: str = "pretraining", **overrides) -> None:
        self.preset = preset
        self.overrides = overrides
        self.arbiter = Arbiter()
        self._p = Point()
        self._setup(_build(preset, overrides))
        self._points = RewindPoints()   # recent detector states, for resumes (not persisted)
        self._next_at = self._points.next_at

    def _setup(self, d: dict) -> None:
        """Hold the detectors, their stages, and point the arbiter at them."""
        self._d = d
        self._first, self._level, self._trend, self._last = stages(d)
        self.arbiter.attach(d)
        self._rj, self._fc = self.arbiter.rj, self.arbiter.fc

    @property
    def detectors(self) -> dict:
        return dict(self._d)

    @property
    def fed(self) -> dict:
        """The names of the detectors each stage of an update feeds (`base.STAGES`)."""
        names = {id(det): name for name, det in self._d.items()}
        return {stage: [names[id(det)] for det in dets] for stage, dets in
                zip(STAGES, (self._first, self._level, self._trend, self._last))}

    @property
    def peak_scores(self) -> dict:
        """The largest gate score per kind while its detector was active (`Arbiter.big`)."""
        return self.arbiter.peak_scores

    @cython.locals(s=cython.longlong, last=cython.longlong)
    def update_loss(self, step: int, loss: float, lr: float | None = None,
                    grad_norm: float | None = None, ts: float | None = None,
                    tokens: float | None = None, timing: dict | None = None) -> MonitorState:
        a = self.arbiter
        out = a.out             # this update's findings (`push`): one list, emptied here
        if out:
            del out[:]
        p = self._point(step, loss, lr, grad_norm)
        p.ts = _NAN if ts is None else ts
        p.tokens = _NAN if tokens is None else tokens
        if timing is not None:
            _timing(p, timing)
        elif p.timed:
            _untimed(p)
        s = p.s
        last = self._rj.went_back(s)
        a.rewound_to = self._rewind(s) if last != NO_STEP else None
        p.from_step = last
        _feed(self._first, p)
        resume(a, p)
        if obvious(a, p):
            return _state(step, p.loss, None, None, None, None, None, None, None, True,
                          tuple(out))
        return self._judge(a, p)

    def checkpoint(self, step: int) -> None:
        """A checkpoint was saved at ``step`` (the daemon's checkpoint event): detectors
        whose page names the last one hear of it (`MemoryDetector.checkpoint`)."""
        for det in self._d.values():
            saved = getattr(det, "checkpoint", None)
            if saved is not None:
                saved(step)

    def _point(self, step, loss, lr, grad_norm):
        """The update's `Point` (the monitor's one, refilled)."""
        p = self._p
        p.step, p.loss, p.s = step, float(loss), step
        p.x = p.loss
        p.lr = None if lr is not None and lr < 0 else lr   # no schedule has one: unknown
        p.grad = float(grad_norm) if grad_norm is not None else None
        return p

    def _judge(self, a, p):
        """The detectors of the loss level, the rules, and the update's `MonitorState`."""
        fc = self._fc
        _feed(self._level, p)
        p.l_pred = fc.l_pred
        p.fc_alert = fc.alert
        _feed(self._trend, p)
        schedule(a, p)
        p.judging = judging(a, p)
        _feed(self._last, p)
        judge(a, p)
        if a.held:              # a page of the loss level waits for it to come back
            a.rec.observe(p.x)
            a.escalate(p.step)
        if p.s >= self._next_at:
            self._points.take(p.step, self._d)
            self._next_at = self._points.next_at
        out = a.out
        return _state(p.step, p.loss, p.l_pred, fc.band_lo, fc.band_hi, fc.D, fc.Q, fc.T, fc.W,
                      a.alert, tuple(out) if out else ())

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
        a = self.arbiter
        val = float(val)
        a.out = []
        evaluation(a, step, val)
        alert = a.alert if math.isfinite(val) else True
        return MonitorState(step=step, l_obs=val, alert=alert, findings=tuple(a.out))

    def snapshot(self, copy: bool = True) -> dict:
        """Plain values; ``copy=False`` shares the detectors' live state with a caller that
        serializes it at once (see `Detector.snapshot`)."""
        a = self.arbiter
        return {"v": 1, "preset": self.preset, "overrides": dict(self.overrides),
                "emitted": {k: list(v) for k, v in a.emitted.items()},
                "recovery": a.rec.snapshot(), "since": dict(a.since),
                "detectors": {k: det.snapshot(copy) for k, det in self._d.items()}}

    def restore(self, snap: dict) -> None:
        if snap.get("v") != 1 or "detectors" not in snap:
            raise ConfigError("monitor snapshot is not version 1")
        self.__init__(snap["preset"], **snap.get("overrides", {}))
        self.arbiter.restore(snap["emitted"], snap.get("recovery", {}), snap.get("since"))
        for k, s in snap["detectors"].items():
            self._d[LEGACY.get(k, k)].restore(s)


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
