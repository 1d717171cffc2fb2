"""`plateau`: learning stopped: no progress since the start, or flat where the forecast falls.

Two rules on ``level``, an EWMA of the loss (half-life ``halflife`` steps):

- *no learning*: ``grace`` steps after the first point (and at least ``min_points``
  points), the best level is less than ``min_progress`` (a fraction) below the starting
  level (the highest level of the first 10% of ``grace``). This is what catches a run
  that never learns, even from a few eval points.
- *stagnation*: the forecast (passed in as ``l_pred``) fell over the last ``window``
  steps while the level moved (either way) by less than ``flat`` times that drop, and
  the forecast detector is alerting (``deviating``): a drift that is a flat line.

>>> det = PlateauDetector()
>>> hit = next(s for s in range(586, 20000, 586) if det.update(s, 8.0 - 1e-6 * s).active)
>>> hit
4102
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import Detector, check, decay, fraction, positive, register


@dataclass(frozen=True, slots=True)
class PlateauState:
    step: int
    active: bool
    rule: str | None       # "no_learning" or "stagnation"
    progress: float        # fraction fallen from the starting level
    level: float


@register
class PlateauDetector(Detector):
    name = "plateau"

    def __init__(self, *, grace: int = 3000, min_progress: float = 0.02, min_points: int = 4,
                 window: int = 1000, flat: float = 0.25, halflife: float = 50.0) -> None:
        for n in ("grace", "window", "min_points"):
            check(isinstance(locals()[n], int) and locals()[n] >= 1, n, locals()[n], "an int >= 1")
        fraction("min_progress", min_progress)
        fraction("flat", flat)
        positive("halflife", halflife)
        self.grace, self.min_progress, self.min_points = grace, min_progress, min_points
        self.window, self.flat, self.halflife = window, flat, halflife
        self._level = None
        self._first = None
        self._last = None
        self._ref = -math.inf
        self._best = math.inf
        self._n = 0
        self._ring = []        # [step, level, l_pred] every window/8 steps, 9 at most

    def update(self, step: int, loss: float, l_pred: float | None = None,
               deviating: bool = False) -> PlateauState:
        if not math.isfinite(loss):
            return PlateauState(step, False, None, 0.0, self._level or 0.0)
        self._n += 1
        if self._level is None:
            self._level, self._first, self._last = loss, step, step
        g = decay(step - self._last, self.halflife)
        self._last = step
        self._level = g * self._level + (1 - g) * loss
        age = step - self._first
        if age <= 0.1 * self.grace:
            self._ref = max(self._ref, self._level)
        self._best = min(self._best, self._level)
        progress = (self._ref - self._best) / max(abs(self._ref), 1e-12)
        if age >= self.grace and self._n >= self.min_points and progress < self.min_progress:
            return PlateauState(step, True, "no_learning", progress, self._level)
        if self._stagnant(step, l_pred) and deviating:
            return PlateauState(step, True, "stagnation", progress, self._level)
        return PlateauState(step, False, None, progress, self._level)

    def _stagnant(self, step: int, l_pred: float | None) -> bool:
        ring = self._ring
        if not ring or step - ring[-1][0] >= self.window / 8:
            ring.append([step, self._level, l_pred])
            if len(ring) > 9:
                ring.pop(0)
        old = ring[0]
        if l_pred is None or old[2] is None or step - old[0] < 0.75 * self.window:
            return False
        drop_pred = old[2] - l_pred
        return drop_pred > 0 and abs(old[1] - self._level) < self.flat * drop_pred
