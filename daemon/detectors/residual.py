"""Sustained-residual detector: the loss stays above its best smoothed level.

A deliberately simple, pure detector: an EWMA of the loss, its running minimum, and an
EWMA of absolute one-step changes as the noise scale. It fires when the smoothed loss
has stayed ``threshold`` noise units above its best for ``patience`` consecutive
updates, and resolves when it comes back under.

>>> import random
>>> rng = random.Random(7)
>>> det = SustainedResidual()
>>> fired = None
>>> for t in range(1, 3001):
...     loss = 3.0 + 5.0 / t ** 0.5 + rng.gauss(0, 0.02) + (0.0004 * (t - 2000) if t > 2000 else 0.0)
...     s = det.update(t, loss)
...     if s.active and fired is None:
...         fired = t
>>> 2000 < fired < 2600
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResidualState:
    step: int
    smoothed: float
    best: float
    noise: float
    score: float
    active: bool


class SustainedResidual:
    def __init__(self, *, alpha: float = 0.02, threshold: float = 6.0, patience: int = 50,
                 warmup: int = 200) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if threshold <= 0:
            raise ValueError(f"threshold must be > 0, got {threshold!r}")
        if patience < 1 or warmup < 1:
            raise ValueError("patience and warmup must be >= 1 (updates)")
        self.alpha = alpha
        self.threshold = threshold
        self.patience = patience
        self.warmup = warmup
        self._n = 0
        self._ewma = math.nan
        self._best = math.inf
        self._noise = 0.0
        self._last = math.nan
        self._above = 0

    def update(self, step: int, loss: float) -> ResidualState:
        if not math.isfinite(loss):
            return ResidualState(step, self._ewma, self._best, self._noise, 0.0, False)
        self._n += 1
        if self._n == 1:
            self._ewma = self._last = loss
        a = self.alpha
        self._noise = (1 - a) * self._noise + a * abs(loss - self._last)
        self._last = loss
        self._ewma = (1 - a) * self._ewma + a * loss
        if self._n < self.warmup:
            self._best = min(self._best, self._ewma)
            return ResidualState(step, self._ewma, self._best, self._noise, 0.0, False)
        scale = max(self._noise * math.sqrt(a / (2 - a)), 1e-12)
        score = (self._ewma - self._best) / scale
        self._best = min(self._best, self._ewma)
        self._above = self._above + 1 if score > self.threshold else 0
        return ResidualState(step, self._ewma, self._best, self._noise, score,
                             self._above >= self.patience)

    def snapshot(self) -> dict:
        return {k: getattr(self, k) for k in ("_n", "_ewma", "_best", "_noise", "_last", "_above")}

    def restore(self, snap: dict) -> None:
        for k, v in snap.items():
            setattr(self, k, v)
