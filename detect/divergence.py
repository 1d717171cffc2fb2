"""`divergence`: the loss runs away from its best level (explosive growth), critical.

``level`` is an EWMA of the loss (half-life ``halflife`` steps), ``best`` its minimum
since ``warmup`` steps. Active once ``level - best`` has exceeded
``max(ratio * |best|, z * scale)`` for ``patience`` steps (and at least two points),
``scale`` being an EWMA of absolute one-step changes; it resolves when the level comes
back under half that margin. The scale is frozen while the level is over half the
margin: a run that diverged is noisy, and letting its noise widen the margin resolved
a critical alert while the loss sat at 2.7, up from 0.03. The margin's ``ratio`` is of
the run's progress (its first level minus its best), not of the loss itself, so an
offset changes nothing and a loss that fell to 1e-4 does not "run away" at 2e-4.
A loss not meant to fall (an RL value loss, a GAN's) is judged against its recent best:
with ``best_halflife`` the best follows the level up at that half-life (steps), so a rise
over a hundred thousand steps (a GAN generator's 1.0 to 1.5) is no run-away while one
within a few half-lives still is; ``None`` (the default): the best never forgets.

>>> det = DivergenceDetector()
>>> hit = next(t for t in range(1, 2000)
...            if det.update(t, 3.0 if t < 1000 else 3.0 * 1.01 ** (t - 1000)).active)
>>> 1000 < hit < 1100
True
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (divergence.pxd)
    from math import isfinite

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, gap_decay, positive, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
MIN_POINTS = 10   # the scale's half-life and the warm-up span at least this many points

_new = tuple.__new__     # a DivergenceState without the NamedTuple's Python-level __new__


class DivergenceState(NamedTuple):
    step: int
    active: bool
    level: float
    best: float
    excess: float        # (level - best) / margin; > 1 means over the margin


@cython.cclass
class DivergenceDetector(Detector):
    """``observe`` leaves the fields of `DivergenceState` as attributes: ``active``,
    ``level``, ``best``, ``excess``."""

    name = "divergence"
    FEED, KIND = "level", "divergence"

    def see(self, p) -> None:
        self._observe(p.s, p.x)

    def verdict(self) -> Verdict:
        """A level that ran away from its best (critical, before the gate)."""
        return Verdict("divergence", self.active, "critical", self.level - self.best,
                       self.halflife, None, {"level": self.level, "best": self.best})
    ARGS = ("ratio", "z", "patience", "halflife", "scale_halflife", "warmup", "best_halflife")
    STATE = ("_level", "_scale", "_best", "_first", "_last", "_since", "_points", "_dt", "_start",
             "_excess", "_n")
    OPTIONAL = ("_level", "_first", "_last", "_since", "_start")

    def __init__(self, *, ratio: float = 0.1, z: float = 30.0, patience: int = 20,
                 halflife: float = 10.0, scale_halflife: float = 200.0, warmup: int = 100,
                 best_halflife: float | None = None) -> None:
        for n, v in (("ratio", ratio), ("z", z), ("halflife", halflife),
                     ("scale_halflife", scale_halflife)):
            positive(n, v)
        if best_halflife is not None:
            positive("best_halflife", best_halflife)
        self.best_halflife = best_halflife
        self._c_best_hl = -1.0 if best_halflife is None else float(best_halflife)
        for n, v in (("patience", patience), ("warmup", warmup)):
            check(isinstance(v, int) and v >= 0, n, v, "an int >= 0 (steps)")
        self.ratio, self.z, self.patience = ratio, z, patience
        self.halflife, self.scale_halflife, self.warmup = halflife, scale_halflife, warmup
        self._c_ratio, self._c_z, self._c_patience = ratio, z, patience   # typed copies
        self._c_halflife, self._c_scale_hl, self._c_warmup = halflife, scale_halflife, warmup
        self._c_level = 0.5 ** (1.0 / halflife)         # per-step EWMA weights (constants)
        self._c_scale = 0.5 ** (1.0 / scale_halflife)
        self._level = NAN
        self._scale = 0.0
        self._best = float("inf")
        self._first = NO_STEP
        self._last = NO_STEP
        self._since = NO_STEP  # step at which the level went over the margin
        self._points = 0
        self._dt = 1.0         # EWMA of the gap between points (steps)
        self._start = NAN      # the first level: progress is start - best
        self._excess = 0.0
        self._n = 0            # points seen
        self.active, self.level, self.best, self.excess = False, 0.0, self._best, 0.0

    def update(self, step: int, loss: float) -> DivergenceState:
        self.observe(step, loss)
        return _new(DivergenceState, (step, self.active, self.level, self.best, self.excess))

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    @cython.locals(dt=cython.longlong, usual=cython.double, level=cython.double,
                   scale=cython.double, d=cython.double, few=cython.double, hs=cython.double,
                   g=cython.double, best=cython.double, margin=cython.double, zs=cython.double,
                   excess=cython.double)
    def _observe(self, step: int, loss: float) -> int:
        if not isfinite(loss):
            self.active = self._since != NO_STEP and self._points >= 2
            self.level = self._level if (self._level == self._level and self._level != 0.0) else 0.0
            self.best, self.excess = self._best, 0.0
            return 0
        if self._level != self._level:           # NaN: no point yet
            self._level, self._first, self._last, self._start = loss, step, step, loss
            self.active, self.level, self.best, self.excess = False, loss, self._best, 0.0
            return 0
        dt = step - self._last
        self._last = step
        usual = self._dt
        if dt > 0:
            self._dt += 0.05 * (dt - usual)
        level = self._level
        scale = self._scale
        d = abs(loss - level)
        self._n += 1
        few = MIN_POINTS * self._dt   # half-lives and warm-up span at least MIN_POINTS points
        if self._excess < 0.5 or self._n < 2 * MIN_POINTS:   # frozen once established
            hs = self._c_scale_hl if self._c_scale_hl > few else few
            g = self._c_scale if dt <= 1 and hs == self._c_scale_hl else gap_decay(dt, usual, hs)
            if 1.0 - g < 1.0 / self._n:
                g = 1.0 - 1.0 / self._n        # a plain mean while the points are few
            if scale > 0 and self._n > MIN_POINTS and d >= 4 * scale:   # winsorized
                d = 4 * scale
            scale = self._scale = g * scale + (1 - g) * d
        g = self._c_level if dt <= 1 else gap_decay(dt, usual, self._c_halflife)
        level = self._level = g * level + (1 - g) * loss
        if step - self._first < self._c_warmup or self._n < MIN_POINTS:
            self.active, self.level, self.best, self.excess = False, level, self._best, 0.0
            return 0
        best = self._best
        if level < best:
            best = self._best = level
        elif self._c_best_hl > 0.0:     # a recent best: it follows the level up
            hs = self._c_best_hl if self._c_best_hl > few else few
            best = self._best = level - (level - best) * gap_decay(dt, usual, hs)
        if self._start != self._start:    # restored from a snapshot of before 2026-12-03
            self._start = level
        margin = self._c_ratio * max(self._start - best, 0.0)
        zs = self._c_z * scale
        if zs > margin:
            margin = zs
        if margin < 1e-12:
            margin = 1e-12
        excess = (level - best) / margin
        self._excess = excess
        if excess > 1.0 or (self._since != NO_STEP and excess > 0.5):
            if self._since == NO_STEP:
                self._since, self._points = step, 0
            self._points += 1
        else:
            self._since = NO_STEP
        self.active = (self._since != NO_STEP and step - self._since >= self._c_patience
                       and self._points >= 2)
        self.level, self.best, self.excess = self._level, self._best, excess


register(DivergenceDetector)
