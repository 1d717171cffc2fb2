"""`rise`: the smoothed loss climbs above its own best, in units of its own noise.

A noise-normalized, spike-robust form of the "median of the last losses above its best"
rule. ``level`` is an EWMA (half-life ``halflife`` steps) of the loss, its upward jumps winsorized at
``clip`` noise units; the noise is an EWMA (half-life ``noise_halflife`` steps) of the
absolute one-step changes (winsorized), which a slow trend does not inflate (its
half-life is at most a quarter of the run's age, so the fast early phase is forgotten). The score is ``(level - best) / noise`` where
``best`` is the lowest level since ``warmup`` steps, and the noise unit is at least
``level_z`` standard deviations of the level itself (sparse logs have a noisier
level: fewer points per half-life); the detector is active once the
score has stayed above ``threshold`` for ``patience`` steps (and two points), or at
once when a CUSUM of ``(loss - best) / noise - jump_k`` (each term clipped at ``jump_clip``)
exceeds ``jump_h``: an abrupt, sustained jump. It
catches every failure that makes the loss go up; the forecast catches the ones that only
stop it going down.

>>> import random
>>> rng = random.Random(2)
>>> det = RiseDetector()
>>> hit = next(t for t in range(1, 20001)
...            if det.update(t, 3 + 5 * t ** -0.5 + rng.gauss(0, 0.1) + max(0, t - 8000) * 3e-4).active)
>>> 8000 < hit < 8800
True
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .base import Detector, check, decay, gap_decay, positive, register


MIN_POINTS = 20   # the noise's half-life spans at least this many of the usual gaps
LEVEL_POINTS = 8  # the level's, this many: its lowest value (the best) is not one low point


class RiseState(NamedTuple):
    step: int
    active: bool
    score: float
    level: float
    best: float
    S: float = 0.0       # the jump CUSUM


@register
class RiseDetector(Detector):
    name = "rise"

    def __init__(self, *, threshold: float = 1.2, halflife: float = 100.0,
                 noise_halflife: float = 500.0, clip: float = 4.0, patience: int = 20,
                 warmup: int = 200, level_z: float = 8.0, jump_k: float = 1.0,
                 jump_h: float = 25.0, jump_clip: float = 10.0) -> None:
        for n in ("threshold", "halflife", "noise_halflife", "clip", "level_z", "jump_k", "jump_h",
                  "jump_clip"):
            positive(n, locals()[n])
        for n in ("patience", "warmup"):
            check(isinstance(locals()[n], int) and locals()[n] >= 0, n, locals()[n], "an int >= 0 (steps)")
        self.threshold, self.halflife, self.noise_halflife = threshold, halflife, noise_halflife
        self.clip, self.patience, self.warmup, self.level_z = clip, patience, warmup, level_z
        self.jump_k, self.jump_h, self.jump_clip = jump_k, jump_h, jump_clip
        self._c_noise = 0.5 ** (1.0 / noise_halflife)   # per-step EWMA weights (constants)
        self._c_level = 0.5 ** (1.0 / halflife)
        self._c_dt, self._c_w = None, 1.0   # cache: the level's noise factor at gap _c_dt
        self._dt = 1.0            # EWMA of the step gap between points
        self._S = 0.0             # CUSUM of (loss - best) / noise - jump_k: abrupt jumps
        self._score = 0.0         # last score; the noise is frozen while evidence builds
        self._level = None
        self._noise = 0.0
        self._best = math.inf
        self._best_w = 0.0        # the level's noise factor when the best was set
        self._first = None
        self._last = None
        self._since = None
        self._points = 0
        self._prev = None

    def rebase(self) -> None:
        """Start the best again from the current level (the monitor calls it when the
        learning-rate schedule explains a rise: a warm restart is a new baseline)."""
        if self._level is not None:
            self._best, self._S, self._since, self._score = self._level, 0.0, None, 0.0

    def update(self, step: int, loss: float) -> RiseState:
        if not math.isfinite(loss) or (self._last is not None and step <= self._last):
            lvl = self._level if self._level is not None else 0.0
            if self._last is not None and step < self._last:
                self._best, self._since, self._last = math.inf, None, step
            return RiseState(step, False, 0.0, lvl, self._best)
        if self._level is None:
            self._level, self._first, self._last, self._prev = loss, step, step, loss
            return RiseState(step, False, 0.0, loss, self._best)
        dt = step - self._last
        self._last = step
        usual = self._dt
        self._dt += 0.05 * (dt - self._dt)
        d = abs(loss - self._prev)             # one-step change: trend-free noise
        self._prev = loss
        noise = self._noise
        if noise > 0:
            cn = self.clip * noise
            if d > cn:
                d = cn
        if self._score < 0.5 * self.threshold and self._S < 0.5 * self.jump_h:
            h = 0.25 * (step - self._first) + 1.0
            hn = self.noise_halflife if self.noise_halflife > MIN_POINTS * usual else MIN_POINTS * usual
            if h > hn:          # a half-life of at least MIN_POINTS points: in a log with a
                h = hn          # point every 500 steps, 500 steps is one point's change
            elif h < 1.0:      # steps resumed before the first one: no negative half-life
                h = 1.0
            g = self._c_noise if (dt == 1 and h == self.noise_halflife) else gap_decay(dt, usual, h)
            noise = self._noise = g * noise + (1 - g) * d if noise > 0 else d
        sd = 0.8862 * noise                      # sigma from E|x_t - x_t-1| = 2 sigma / sqrt(pi)
        r = loss - self._level
        c = self.clip * sd
        if sd > 0 and r > c:                     # upward outliers (spikes) are clipped
            r = c
        hl = self.halflife if self.halflife > LEVEL_POINTS * usual else LEVEL_POINTS * usual
        g = self._c_level if dt == 1 and hl == self.halflife else gap_decay(dt, usual, hl)
        level = self._level = self._level + (1 - g) * r
        if step - self._first < self.warmup or noise <= 0:
            return RiseState(step, False, 0.0, level, self._best)
        if self._dt != self._c_dt:               # EWMA weight per point, for the mean gap
            a = 1.0 - decay(self._dt, max(self.halflife, LEVEL_POINTS * self._dt))
            self._c_dt, self._c_w = self._dt, max(1.0, self.level_z * math.sqrt(a / (2 - a)))
        w = self._c_w
        best = self._best
        # a log that became denser (the level's noise factor fell by a third): a best set
        # while the level was noisier is biased low by that noise, so it starts again
        if level < best or w < 0.67 * self._best_w:
            best = self._best = level
            self._best_w = w
        score = (level - best) / (sd * w)
        jump = (loss - best) / sd
        S = self._S + (jump if jump < self.jump_clip else self.jump_clip) - self.jump_k
        S = self._S = S if S > 0.0 else 0.0
        self._score = score
        if score > self.threshold:
            if self._since is None:
                self._since, self._points = step, 0
            self._points += 1
        else:
            self._since = None
        active = (self._since is not None and step - self._since >= self.patience
                  and self._points >= 2) or S > self.jump_h
        return RiseState(step, active, score, self._level, self._best, self._S)
