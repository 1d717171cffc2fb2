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

>>> det = DivergenceDetector()
>>> hit = next(t for t in range(1, 2000)
...            if det.update(t, 3.0 if t < 1000 else 3.0 * 1.01 ** (t - 1000)).active)
>>> 1000 < hit < 1100
True
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .base import Detector, check, gap_decay, positive, register


MIN_POINTS = 10   # the scale's half-life and the warm-up span at least this many points


class DivergenceState(NamedTuple):
    step: int
    active: bool
    level: float
    best: float
    excess: float        # (level - best) / margin; > 1 means over the margin


@register
class DivergenceDetector(Detector):
    name = "divergence"

    def __init__(self, *, ratio: float = 0.1, z: float = 30.0, patience: int = 20,
                 halflife: float = 10.0, scale_halflife: float = 200.0, warmup: int = 100) -> None:
        for n in ("ratio", "z", "halflife", "scale_halflife"):
            positive(n, locals()[n])
        for n in ("patience", "warmup"):
            check(isinstance(locals()[n], int) and locals()[n] >= 0, n, locals()[n], "an int >= 0 (steps)")
        self.ratio, self.z, self.patience = ratio, z, patience
        self.halflife, self.scale_halflife, self.warmup = halflife, scale_halflife, warmup
        self._c_level = 0.5 ** (1.0 / halflife)         # per-step EWMA weights (constants)
        self._c_scale = 0.5 ** (1.0 / scale_halflife)
        self._level = None
        self._scale = 0.0
        self._best = math.inf
        self._first = None
        self._last = None
        self._since = None     # step at which the level went over the margin
        self._points = 0
        self._dt = 1.0         # EWMA of the gap between points (steps)
        self._start = None     # the first level: progress is start - best
        self._excess = 0.0
        self._n = 0            # points seen

    def update(self, step: int, loss: float) -> DivergenceState:
        if not math.isfinite(loss):
            return DivergenceState(step, self._since is not None and self._points >= 2,
                                   self._level or 0.0, self._best, 0.0)
        if self._level is None:
            self._level, self._first, self._last, self._start = loss, step, step, loss
            return DivergenceState(step, False, loss, self._best, 0.0)
        dt = step - self._last
        self._last = step
        usual = self._dt
        if dt > 0:
            self._dt += 0.05 * (dt - usual)
        level, scale = self._level, self._scale
        d = abs(loss - level)
        self._n += 1
        few = MIN_POINTS * self._dt    # half-lives and warm-up span at least MIN_POINTS points
        if self._excess < 0.5 or self._n < 2 * MIN_POINTS:   # frozen once established
            hs = self.scale_halflife if self.scale_halflife > few else few
            g = self._c_scale if dt <= 1 and hs == self.scale_halflife else gap_decay(dt, usual, hs)
            if 1.0 - g < 1.0 / self._n:
                g = 1.0 - 1.0 / self._n        # a plain mean while the points are few
            cap = 4 * scale if scale > 0 and self._n > MIN_POINTS else math.inf
            scale = self._scale = g * scale + (1 - g) * (d if d < cap else cap)
        g = self._c_level if dt <= 1 else gap_decay(dt, usual, self.halflife)
        level = self._level = g * level + (1 - g) * loss
        if step - self._first < self.warmup or self._n < MIN_POINTS:
            return DivergenceState(step, False, level, self._best, 0.0)
        best = self._best
        if level < best:
            best = self._best = level
        if self._start is None:    # restored from a snapshot of before 2026-12-03
            self._start = level
        margin = self.ratio * max(self._start - best, 0.0)
        zs = self.z * scale
        if zs > margin:
            margin = zs
        if margin < 1e-12:
            margin = 1e-12
        excess = self._excess = (level - best) / margin
        if excess > 1.0 or (self._since is not None and excess > 0.5):
            if self._since is None:
                self._since, self._points = step, 0
            self._points += 1
        else:
            self._since = None
        active = self._since is not None and step - self._since >= self.patience and self._points >= 2
        return DivergenceState(step, active, self._level, self._best, excess)
