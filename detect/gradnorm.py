"""`gradnorm`: surges of the gradient norm, the context a loss page needs.

A loss spike or a divergence is often preceded by a surge of the gradient norm a few
steps earlier. This detector never pages on its own: a healthy run's gradient norm
jumps too (a hard batch, an fp16 loss-scale overflow that skips a step), and a page
must state an effect on the loss. It remembers the last surge, so that a loss page can
say "grad norm surged 9.3x its level at step 790, 10 steps before".

It works on ``x = ln(grad_norm)``, so it is invariant to the norm's scale: ``level`` an
EWMA of ``x`` (half-life ``level_halflife`` points, fed only with non-surge points),
``scale`` an EWMA of ``|x - level|`` (half-life ``scale_halflife`` points, winsorized at
4 scales). After ``warmup`` points a point is a surge when ``x - level`` exceeds both
``ln(ratio)`` and ``z`` scales. A non-finite or non-positive norm (an overflow the
optimizer skipped) is counted and remembered, never fed to the level.

>>> det = GradNormDetector()
>>> for t in range(1, 101):
...     st = det.update(t, 1.0 + 0.05 * (t % 3))
>>> det.update(101, 12.0).surge, det.update(102, 1.05).surge
(True, False)
>>> det.context(110, 50)
'grad norm surged 11.4x its level at step 101, 9 steps before'
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (gradnorm.pxd)
    from math import exp, isfinite, log

from .base import NAN, Detector, check, positive, register
from .finding import Verdict

_new = tuple.__new__     # a GradNormState without the NamedTuple's Python-level __new__


class GradNormState(NamedTuple):
    step: int
    ratio: float          # grad_norm over its level (1.0 before the warm-up ends)
    surge: bool


@cython.cclass
class GradNormDetector(Detector):
    """``observe`` leaves the fields of `GradNormState` as attributes: ``ratio``, ``surge``."""

    name = "gradnorm"
    FEED = "first"     # context for the pages of the loss (`context`), never a page itself

    def see(self, p) -> None:
        if p.grad is not None:
            self._observe(p.s, p.grad)
    ARGS = ("ratio", "z", "level_halflife", "scale_halflife", "warmup")
    STATE = ("_level", "_scale", "_n", "_last", "_in", "_bad", "_bad_count")
    OPTIONAL = ("_level",)

    def __init__(self, *, ratio: float = 3.0, z: float = 6.0, level_halflife: float = 20.0,
                 scale_halflife: float = 100.0, warmup: int = 20) -> None:
        for n, v in (("ratio", ratio), ("z", z), ("level_halflife", level_halflife),
                     ("scale_halflife", scale_halflife)):
            positive(n, v)
        check(ratio > 1.0, "ratio", ratio, "> 1 (a surge is this many times the level)")
        check(isinstance(warmup, int) and warmup >= 2, "warmup", warmup, "an int >= 2 (points)")
        self.ratio, self.z, self.warmup = ratio, z, warmup
        self.level_halflife, self.scale_halflife = level_halflife, scale_halflife
        self._c_z, self._c_warmup = z, warmup           # typed copies
        self._c_level = 0.5 ** (1.0 / level_halflife)
        self._c_scale = 0.5 ** (1.0 / scale_halflife)
        self._c_log_ratio = log(ratio)
        self._level = NAN         # EWMA of ln(grad_norm)
        self._scale = 0.0         # EWMA of |ln(grad_norm) - level|
        self._n = 0               # finite points seen
        self._last = None         # [first step, peak ratio] of the newest surge episode
        self._in = False          # the previous point was part of it
        self._bad = None          # [step, value] of the newest non-finite / non-positive norm
        self._bad_count = 0
        self.last_ratio, self.surge = 1.0, False

    def update(self, step: int, grad_norm: float) -> GradNormState:
        self.observe(step, float(grad_norm))
        return _new(GradNormState, (step, self.last_ratio, self.surge))

    def observe(self, step: int, g: float) -> None:
        """``last_ratio`` is the state's ``ratio`` (``ratio`` is the argument)."""
        self._observe(step, g)

    @cython.locals(x=cython.double, dev=cython.double, surge=cython.bint, c=cython.double,
                   cap=cython.double)
    def _observe(self, step: int, g: float) -> int:
        if not (g > 0.0 and isfinite(g)):
            self._bad, self._bad_count = [step, g if isfinite(g) else str(g)], self._bad_count + 1
            self.last_ratio, self.surge = 1.0, False
            return 0
        x = log(g)
        self._n += 1
        if self._level != self._level:           # NaN: no point yet
            self._level = x
            self.last_ratio, self.surge = 1.0, False
            return 0
        dev = x - self._level
        surge = (self._n > self._c_warmup and dev > self._c_log_ratio
                              and dev > self._c_z * self._scale)
        if surge:
            if self._in:                         # one episode: its first step, its peak
                self._last[1] = max(self._last[1], exp(dev))
            else:
                self._last = [step, exp(dev)]
        self._in = surge
        if not surge:
            c = self._c_level
            self._level = c * self._level + (1.0 - c) * x
        cap = 4.0 * self._scale if self._n > self._c_warmup else abs(dev)
        c = self._c_scale
        self._scale = c * self._scale + (1.0 - c) * min(abs(dev), cap)
        self.last_ratio, self.surge = exp(dev), surge

    def context(self, step: int, within: int) -> str:
        """A sentence on the newest surge (or non-finite norm) at most ``within`` steps
        before ``step``; "" when there was none."""
        parts = []
        if self._last is not None and 0 <= step - self._last[0] <= within:
            s, r = self._last
            parts.append(f"grad norm surged {r:.3g}x its level at step {s}, {step - s} steps before")
        if self._bad is not None and 0 <= step - self._bad[0] <= within:
            parts.append(f"grad norm was {self._bad[1]} at step {self._bad[0]}")
        return "; ".join(parts)


register(GradNormDetector)
