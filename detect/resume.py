"""`resume_jump`: the step went backwards (a resume or restart), and the loss with it.

Active for the one update at which the step goes back. Severity ``info`` when the loss
continues where the run was at that step, ``warning`` when it jumped by more than
``z`` noise units (``scale``: EWMA of absolute one-step changes, half-life
``scale_halflife`` steps) above the last loss seen before the resume. In `RunMonitor` the
detectors are first rewound to where they stood before the resumed step (`rewind`), so
that loss is the one the run had there, not the one at the step it went back from.

>>> det = ResumeDetector()
>>> states = [det.update(t, 2.0 + 0.01 * (t % 2)) for t in range(1, 100)] + [det.update(50, 2.6)]
>>> states[-1].active, states[-1].severity
(True, 'warning')
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (resume.pxd)
    from math import isfinite

from .base import NAN, NO_STEP as _NO_STEP, Detector, gap_decay, positive, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)

_new = tuple.__new__     # a ResumeState without the NamedTuple's Python-level __new__


class ResumeState(NamedTuple):
    step: int
    active: bool
    severity: str | None
    from_step: int | None = None
    jump: float = 0.0


@cython.cclass
class ResumeDetector(Detector):
    """``observe`` (and ``observe_resumed``) leave the fields of `ResumeState` as
    attributes: ``active``, ``severity``, ``from_step``, ``jump``."""

    name = "resume_jump"
    FEED, KIND = "first", "resume_jump"

    def see(self, p) -> None:
        if p.from_step != NO_STEP:
            self.observe_resumed(p.s, p.x, p.from_step)
        else:
            self._observe(p.s, p.x)

    def went_back(self, step: int) -> int:
        """The last step seen when ``step`` goes back before it (a resume), else `NO_STEP`."""
        return self._last_step if self._last_step != NO_STEP and step < self._last_step else NO_STEP

    def verdict(self) -> Verdict:
        """The loss's jump across a resume (warning when it is large against its scale)."""
        return Verdict("resume_jump", self.active, self.severity or "info", abs(self.jump),
                       self.scale_halflife, self.from_step, {"jump": self.jump})
    ARGS = ("z", "scale_halflife")
    STATE = ("_last_step", "_last_loss", "_scale", "_dt")
    OPTIONAL = ("_last_step", "_last_loss")

    def __init__(self, *, z: float = 6.0, scale_halflife: float = 200.0) -> None:
        positive("z", z)
        positive("scale_halflife", scale_halflife)
        self.z, self.scale_halflife = z, scale_halflife
        self._c_z, self._c_scale_hl = z, scale_halflife  # typed copies
        self._c_scale = 0.5 ** (1.0 / scale_halflife)    # per-step EWMA weight (a constant)
        self._last_step = NO_STEP
        self._last_loss = NAN
        self._scale = 0.0
        self._dt = 1.0             # EWMA of the gap between points (steps)
        self.active, self.severity, self._from, self.jump = False, None, NO_STEP, 0.0

    @property
    def last_step(self) -> int | None:
        """The latest step seen (None before the first)."""
        return None if self._last_step == NO_STEP else self._last_step

    @property
    def from_step(self) -> int | None:
        return None if self._from == NO_STEP else self._from

    def _state(self, step: int) -> ResumeState:
        return _new(ResumeState, (step, self.active, self.severity, self.from_step, self.jump))

    def update(self, step: int, loss: float) -> ResumeState:
        self.observe(step, loss)
        return self._state(step)

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    @cython.locals(prev_step=cython.longlong, prev=cython.double, dt=cython.longlong,
                   usual=cython.double, g=cython.double, d=cython.double, scale=cython.double,
                   cap=cython.double)
    def _observe(self, step: int, loss: float) -> int:
        prev_step = self._last_step
        prev = self._last_loss
        if prev_step != NO_STEP and step < prev_step:
            self.observe_resumed(step, loss, prev_step)
            return 0
        self._last_step = step
        if isfinite(loss):
            if prev == prev:                     # not NaN: a loss before this one
                dt = step - prev_step
                usual = self._dt
                self._dt += 0.05 * (dt - usual)
                g = self._c_scale if dt <= 1 else gap_decay(dt, usual, self._c_scale_hl)
                d = abs(loss - prev)
                scale = self._scale
                cap = 4 * scale if scale > 0 else d
                self._scale = g * scale + (1 - g) * (d if d < cap else cap)
            self._last_loss = loss
        self.active, self.severity, self._from, self.jump = False, None, NO_STEP, 0.0

    def resumed(self, step: int, loss: float, from_step: int) -> ResumeState:
        """The step went back from ``from_step`` to ``step``: judge the loss's jump against
        the last loss this detector saw (the monitor first rewinds it to a point before
        ``step``, so that is the loss the run had there, not at ``from_step``)."""
        self.observe_resumed(step, loss, from_step)
        return self._state(step)

    @cython.locals(prev=cython.double, finite=cython.bint, jump=cython.double, big=cython.bint)
    def observe_resumed(self, step: int, loss: float, from_step: int) -> None:
        prev = self._last_loss
        self._last_step = step
        finite = isfinite(loss)
        jump = loss - prev if (finite and prev == prev) else 0.0
        big = jump > self._c_z * max(self._scale, 1e-12) and self._scale > 0
        if finite:
            self._last_loss = loss
        self.active, self.severity, self._from, self.jump = (
            True, "warning" if big else "info", from_step, jump)


register(ResumeDetector)
