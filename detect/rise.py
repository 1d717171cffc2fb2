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
exceeds ``jump_h``: an abrupt, sustained jump (the CUSUM stops at ``S_CAP * jump_h``). It
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

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (rise.pxd)
    from math import isfinite, sqrt

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, decay, gap_decay, positive, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
MIN_POINTS = 20   # the noise's half-life spans at least this many of the usual gaps
LEVEL_POINTS = 8  # the level's, this many: its lowest value (the best) is not one low point
# the jump CUSUM stops at this many times ``jump_h``: a loss back at its best stops the
# verdict within about ``jump_h`` points (300 steps at chance took 2,700 to drain before)
S_CAP = 2.0

_new = tuple.__new__     # a RiseState without the NamedTuple's Python-level __new__


class RiseState(NamedTuple):
    step: int
    active: bool
    score: float
    level: float
    best: float
    S: float = 0.0       # the jump CUSUM


@cython.cclass
class RiseDetector(Detector):
    """``observe`` leaves the fields of `RiseState` as attributes: ``active``, ``score``,
    ``level``, ``best``, ``S``."""

    name = "rise"
    FEED, KIND = "level", "drift"

    def see(self, p) -> None:
        self._observe(p.s, p.x)

    def verdict(self) -> Verdict:
        """A smoothed level that rose above its best (a drift, warning)."""
        return Verdict("drift", self.active, "warning", self.level - self.best, self.halflife,
                       None, {"level": self.level, "best": self.best, "score": self.score,
                              "S": self.S})
    ARGS = ("threshold", "halflife", "noise_halflife", "clip", "patience", "warmup", "level_z",
            "jump_k", "jump_h", "jump_clip")
    STATE = ("_dt", "_S", "_score", "_level", "_noise", "_best", "_best_w", "_first", "_last",
             "_since", "_points", "_prev")
    OPTIONAL = ("_level", "_first", "_last", "_since", "_prev")

    def __init__(self, *, threshold: float = 1.2, halflife: float = 100.0,
                 noise_halflife: float = 500.0, clip: float = 4.0, patience: int = 20,
                 warmup: int = 200, level_z: float = 8.0, jump_k: float = 1.0,
                 jump_h: float = 25.0, jump_clip: float = 10.0) -> None:
        for n, v in (("threshold", threshold), ("halflife", halflife),
                     ("noise_halflife", noise_halflife), ("clip", clip), ("level_z", level_z),
                     ("jump_k", jump_k), ("jump_h", jump_h), ("jump_clip", jump_clip)):
            positive(n, v)
        for n, v in (("patience", patience), ("warmup", warmup)):
            check(isinstance(v, int) and v >= 0, n, v, "an int >= 0 (steps)")
        self.threshold, self.halflife, self.noise_halflife = threshold, halflife, noise_halflife
        self.clip, self.patience, self.warmup, self.level_z = clip, patience, warmup, level_z
        self.jump_k, self.jump_h, self.jump_clip = jump_k, jump_h, jump_clip
        self._c_threshold, self._c_halflife, self._c_noise_hl = threshold, halflife, noise_halflife
        self._c_clip, self._c_patience, self._c_warmup, self._c_level_z = (
            clip, patience, warmup, level_z)
        self._c_jump_k, self._c_jump_h, self._c_jump_clip = jump_k, jump_h, jump_clip
        self._c_noise = 0.5 ** (1.0 / noise_halflife)   # per-step EWMA weights (constants)
        self._c_level = 0.5 ** (1.0 / halflife)
        self._c_dt, self._c_w = NAN, 1.0   # cache: the level's noise factor at gap _c_dt
        self._dt = 1.0            # EWMA of the step gap between points
        self._S = 0.0             # CUSUM of (loss - best) / noise - jump_k: abrupt jumps
        self._score = 0.0         # last score; the noise is frozen while evidence builds
        self._level = NAN
        self._noise = 0.0
        self._best = float("inf")
        self._best_w = 0.0        # the level's noise factor when the best was set
        self._first = NO_STEP
        self._last = NO_STEP
        self._since = NO_STEP
        self._points = 0
        self._prev = NAN
        self.active, self.score, self.level, self.best, self.S = False, 0.0, 0.0, self._best, 0.0

    def rebase(self) -> None:
        """Start the best again from the current level (the monitor calls it when the
        learning-rate schedule explains a rise: a warm restart is a new baseline)."""
        if self._level == self._level:
            self._best, self._S, self._since, self._score = self._level, 0.0, NO_STEP, 0.0

    def update(self, step: int, loss: float) -> RiseState:
        self.observe(step, loss)
        return _new(RiseState, (step, self.active, self.score, self.level, self.best, self.S))

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    @cython.locals(lvl=cython.double, dt=cython.longlong, usual=cython.double, d=cython.double,
                   noise=cython.double, cn=cython.double, h=cython.double, hn=cython.double,
                   g=cython.double, sd=cython.double, r=cython.double, c=cython.double,
                   hl=cython.double, level=cython.double, a=cython.double, w=cython.double,
                   best=cython.double, score=cython.double, jump=cython.double, S=cython.double)
    def _observe(self, step: int, loss: float) -> int:
        if not isfinite(loss) or (self._last != NO_STEP and step <= self._last):
            lvl = self._level if self._level == self._level else 0.0
            if self._last != NO_STEP and step < self._last:
                self._best, self._since, self._last = float("inf"), NO_STEP, step
            self.active, self.score, self.level, self.best, self.S = (
                False, 0.0, lvl, self._best, 0.0)
            return 0
        if self._level != self._level:           # NaN: no point yet
            self._level, self._first, self._last, self._prev = loss, step, step, loss
            self.active, self.score, self.level, self.best, self.S = (
                False, 0.0, loss, self._best, 0.0)
            return 0
        dt = step - self._last
        self._last = step
        usual = self._dt
        self._dt += 0.05 * (dt - self._dt)
        d = abs(loss - self._prev)             # one-step change: trend-free noise
        self._prev = loss
        noise = self._noise
        if noise > 0:
            cn = self._c_clip * noise
            if d > cn:
                d = cn
        if self._score < 0.5 * self._c_threshold and self._S < 0.5 * self._c_jump_h:
            h = 0.25 * (step - self._first) + 1.0
            hn = self._c_noise_hl if self._c_noise_hl > MIN_POINTS * usual else MIN_POINTS * usual
            if h > hn:          # a half-life of at least MIN_POINTS points: in a log with a
                h = hn          # point every 500 steps, 500 steps is one point's change
            elif h < 1.0:      # steps resumed before the first one: no negative half-life
                h = 1.0
            g = self._c_noise if (dt == 1 and h == self._c_noise_hl) else gap_decay(dt, usual, h)
            noise = self._noise = g * noise + (1 - g) * d if noise > 0 else d
        sd = 0.8862 * noise          # sigma from E|x_t - x_t-1| = 2 sigma / sqrt(pi)
        r = loss - self._level
        c = self._c_clip * sd
        if sd > 0 and r > c:                     # upward outliers (spikes) are clipped
            r = c
        hl = (self._c_halflife if self._c_halflife > LEVEL_POINTS * usual
                             else LEVEL_POINTS * usual)
        g = self._c_level if dt == 1 and hl == self._c_halflife else gap_decay(dt, usual, hl)
        level = self._level + (1 - g) * r
        self._level = level
        if step - self._first < self._c_warmup or noise <= 0:
            self.active, self.score, self.level, self.best, self.S = (
                False, 0.0, level, self._best, 0.0)
            return 0
        if self._dt != self._c_dt:               # EWMA weight per point, for the mean gap
            a = 1.0 - decay(self._dt, max(self._c_halflife, LEVEL_POINTS * self._dt))
            self._c_dt, self._c_w = self._dt, max(1.0, self._c_level_z * sqrt(a / (2 - a)))
        w = self._c_w
        best = self._best
        # a log that became denser (the level's noise factor fell by a third): a best set
        # while the level was noisier is biased low by that noise, so it starts again
        if level < best or w < 0.67 * self._best_w:
            best = self._best = level
            self._best_w = w
        score = (level - best) / (sd * w)
        jump = (loss - best) / sd
        S = self._S + (jump if jump < self._c_jump_clip else self._c_jump_clip) - self._c_jump_k
        if S > S_CAP * self._c_jump_h:
            S = S_CAP * self._c_jump_h
        S = self._S = S if S > 0.0 else 0.0
        self._score = score
        if score > self._c_threshold:
            if self._since == NO_STEP:
                self._since, self._points = step, 0
            self._points += 1
        else:
            self._since = NO_STEP
        self.active = (self._since != NO_STEP and step - self._since >= self._c_patience
                       and self._points >= 2) or S > self._c_jump_h
        self.score, self.level, self.best, self.S = score, self._level, self._best, self._S


register(RiseDetector)
