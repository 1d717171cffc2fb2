"""`spike`: a jump of the loss far above its recent level, judged by whether it recovers.

The robust z of the change is ``(loss - level) / scale``: ``level`` an EWMA of the loss
(half-life ``level_halflife`` steps) and ``scale`` an EWMA of absolute one-step changes
(half-life ``scale_halflife`` steps); the level is fed only with non-spike points, the
scale with every point, winsorized at 4 scales (fed only with the quiet ones, a
heavy-tailed mini-batch loss collapsed it: every other batch became a "spike"). A jump with
z >= ``z`` opens a spike. If the loss is back under ``level + recover_z * scale`` within
``recover`` steps the spike was a benign one-batch outlier: state ``severity="info"``.
Otherwise it is a sustained spike (``severity="warning"``, active until it recovers).
Every half-life spans at least ``min_points`` of the stream's usual gaps: in a log with
a point every 500 steps, a 200-step half-life would make the scale one point's change,
and every ordinary point after a quiet one a "spike". ``height`` in the state is the
highest jump above the level since the spike opened; once the spike is sustained, the
height it *holds*: the lowest of the points after the one that opened it (a PINN's loss
jumped from 0.12 to 1.74 for one logged point, then sat 0.2 above its level for three:
a shift of 0.2 while it lasted, not of 1.6).

>>> import random
>>> rng = random.Random(3)
>>> det = SpikeDetector()
>>> out = []
>>> for t in range(1, 801):
...     loss = 3.0 + rng.gauss(0, 0.05) + (1.5 if t == 300 else 0.0) + (1.0 if t >= 600 else 0.0)
...     s = det.update(t, loss)
...     if s.severity and (not out or out[-1][1] != s.severity):
...         out.append((t, s.severity))
>>> out
[(301, 'info'), (610, 'warning')]
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (spike.pxd)
    from math import isfinite

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, gap_decay, positive, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
WARM_POINTS = cython.declare(cython.longlong, 10)   # moved points before a spike can open

_new = tuple.__new__     # a SpikeState without the NamedTuple's Python-level __new__


class SpikeState(NamedTuple):
    step: int
    z: float
    active: bool                 # a sustained spike is going on
    severity: str | None         # "info" (recovered outlier), "warning" (sustained), None
    spike_step: int | None = None
    height: float = 0.0          # loss minus the pre-spike level, at this update


@cython.cclass
class SpikeDetector(Detector):
    """``observe`` leaves the fields of `SpikeState` as attributes: ``active``,
    ``severity``, ``spike_step``, ``height``, and ``last_z`` (the state's ``z``: ``z`` is
    the threshold argument)."""

    name = "spike"
    FEED, KIND = "level", "spike"

    def see(self, p) -> None:
        self._observe(p.s, p.x)

    def verdict(self) -> Verdict:
        """A jump that has not come back (``warning``), or one that did (``info``)."""
        return Verdict("spike", self.active, self.severity or "info", self.height,
                       self.level_halflife, self.spike_step, {"height": self.height})
    ARGS = ("z", "recover", "recover_z", "level_halflife", "scale_halflife", "warmup", "min_points")
    STATE = ("_level", "_scale", "_last", "_first", "_open", "_height", "_held", "_later",
             "_sustained", "_dt", "_n", "_prev")
    OPTIONAL = ("_level", "_last", "_first", "_open", "_prev")

    def __init__(self, *, z: float = 8.0, recover: int = 10, recover_z: float = 3.0,
                 level_halflife: float = 10.0, scale_halflife: float = 200.0,
                 warmup: int = 50, min_points: int = 20) -> None:
        for n, v in (("z", z), ("recover_z", recover_z), ("level_halflife", level_halflife),
                     ("scale_halflife", scale_halflife)):
            positive(n, v)
        check(isinstance(recover, int) and recover >= 1, "recover", recover, "an int >= 1 (steps)")
        check(isinstance(warmup, int) and warmup >= 0, "warmup", warmup, "an int >= 0 (steps)")
        check(isinstance(min_points, int) and min_points >= 1, "min_points", min_points, "an int >= 1")
        self.min_points = min_points
        self.z, self.recover, self.recover_z = z, recover, recover_z
        self.level_halflife, self.scale_halflife, self.warmup = (
            level_halflife, scale_halflife, warmup)
        self._c_z, self._c_recover, self._c_recover_z = z, recover, recover_z   # typed copies
        self._c_level_hl, self._c_scale_hl = level_halflife, scale_halflife
        self._c_warmup, self._c_min_points = warmup, min_points
        self._c_level = 0.5 ** (1.0 / level_halflife)   # per-step EWMA weights (constants)
        self._c_scale = 0.5 ** (1.0 / scale_halflife)
        self._level = NAN
        self._scale = 0.0
        self._last = NO_STEP
        self._first = NO_STEP
        self._open = NO_STEP     # step of the open spike
        self._height = 0.0
        self._held = 0.0         # the lowest height of the points after the opening one
        self._later = 0          # points seen since it opened
        self._sustained = False
        self._dt = 1.0           # EWMA of the gap between points (steps)
        self._n = 0              # first differences that moved, counted to WARM_POINTS (the warm mean)
        self._prev = NAN         # the last loss, while the scale is warming up
        self.last_z, self.active, self.severity, self._since, self.height = (
            0.0, False, None, NO_STEP, 0.0)

    @property
    def spike_step(self) -> int | None:
        return None if self._since == NO_STEP else self._since

    def update(self, step: int, loss: float) -> SpikeState:
        self.observe(step, loss)
        return _new(SpikeState, (step, self.last_z, self.active, self.severity, self.spike_step,
                                 self.height))

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    @cython.locals(dt=cython.longlong, usual=cython.double, sc=cython.double, z=cython.double)
    def _observe(self, step: int, loss: float) -> int:
        if not isfinite(loss):
            self.last_z, self.active, self.severity, self._since, self.height = (
                0.0, self._sustained, "warning" if self._sustained else None, NO_STEP, 0.0)
            return 0
        if self._level != self._level:           # NaN: no point yet
            self._level, self._last, self._first, self._prev = loss, step, step, loss
            self.last_z, self.active, self.severity, self._since, self.height = (
                0.0, False, None, NO_STEP, 0.0)
            return 0
        dt = max(step - self._last, 1)
        self._last = step
        usual = self._dt
        self._dt += 0.05 * (dt - usual)
        sc = max(self._scale, 1e-12)
        z = (loss - self._level) / sc
        if self._open != NO_STEP:
            self._follow(step, loss, z)
            return 0
        if (z >= self._c_z and step - self._first >= self._c_warmup and self._scale > 0
                and self._n >= WARM_POINTS):
            self._open, self._height, self._later = step, loss - self._level, 0
            self._held = self._height
            self.last_z, self.active, self.severity, self._since, self.height = (
                z, False, None, step, self._height)
            return 0
        self._learn(loss, dt, usual, True)
        self.last_z, self.active, self.severity, self._since, self.height = (
            z, False, None, NO_STEP, 0.0)

    @cython.locals(since=cython.longlong, height=cython.double, sustained=cython.bint)
    def _follow(self, step: int, loss: float, z: float) -> None:
        self._later += 1
        self._learn(loss, 1.0, 1.0, False)   # the scale keeps learning, winsorized
        since = self._open
        if loss - self._level > self._height:
            self._height = loss - self._level
        if self._later == 1 or loss - self._level < self._held:
            self._held = loss - self._level
        height = self._height
        if z < self._c_recover_z:
            sustained = self._sustained
            self._open, self._later, self._sustained = NO_STEP, 0, False
            self._learn(loss, 1.0, 1.0, True)
            if not sustained and step - since <= self._c_recover:
                self.last_z, self.active, self.severity, self._since, self.height = (
                    z, False, "info", since, height)
                return
            self.last_z, self.active, self.severity, self._since, self.height = (
                z, False, None, since, height)
            return
        if step - since >= self._c_recover and self._later >= 2:
            self._sustained = True
        if self._sustained:
            self.last_z, self.active, self.severity, self._since, self.height = (
                z, True, "warning", since, self._held)
            return
        self.last_z, self.active, self.severity, self._since, self.height = (
            z, False, None, since, height)

    @cython.locals(d=cython.double, few=cython.double, g=cython.double, cap=cython.double)
    def _learn(self, loss: float, dt: float, usual: float, level: bool) -> None:
        d = abs(loss - self._level)
        few = self._c_min_points * self._dt   # a half-life spans at least min_points
        if level and self._n < WARM_POINTS:
            # the first changes: the mean of the first differences (x 0.73, the same scale as
            # |loss - level| for white noise), not the first change winsorized, which could
            # not grow (4 scales a point at most): a DPO loss sits at exactly ln 2 until its
            # policy moves, its scatter grows with the lr's warm-up, and each later point was
            # a "jump". A first difference carries a descent's slope once; |loss - level|
            # carries the level's lag behind it, about 14 steps of it
            if loss != self._prev and self._prev == self._prev:
                self._n += 1
                self._scale += (0.73 * abs(loss - self._prev) - self._scale) / self._n
            self._prev = loss
        else:
            if self._scale == 0.0:
                self._scale = d
            g = (self._c_scale if dt == 1 and few <= self._c_scale_hl
                 else gap_decay(dt, usual, max(self._c_scale_hl, few)))
            cap = 4 * self._scale + 1e-12
            self._scale = g * self._scale + (1 - g) * (d if d < cap else cap)
        if not level:
            return
        g = (self._c_level if dt == 1 and few <= 4 * self._c_level_hl
             else gap_decay(dt, usual, max(self._c_level_hl, 0.25 * few)))
        self._level = g * self._level + (1 - g) * loss


register(SpikeDetector)
