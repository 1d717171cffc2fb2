"""`effect`: how large a deviation must be, in loss units, before it may page.

The other detectors decide whether a deviation is *there* (statistically); this one says
whether it is *large enough to matter to a person*. It measures, at the time scale of
the statistics that page (levels over about a hundred steps, not single steps):

- ``level``: an EWMA of the loss (half-life ``halflife`` steps, at least ``min_points``
  points), upward outliers winsorized; and a fast one at a fifth of that half-life, whose
  rise above the best less two of its own sds counts for an abrupt shift;
- ``progress``: how far the run has come, ``start - best``: ``start`` the highest level
  of the first ``start_points`` points, ``best`` the lowest level after them;
- ``wobble``: how much that level wanders in this run when nothing is wrong, at its own
  time scale: every ``tau`` = twice the level's half-life (so that neighbouring samples
  share little of their weights), the third difference of the level
  ``L(t) - 3 L(t - tau) + 3 L(t - 2 tau) - L(t - 3 tau)`` (a trend cancels, and so does a
  steady curvature, which a second difference would count: a short fine-tune that falls
  from 3.5 to 0.5 bends all the way; a wobble does not cancel), the lower quartile of
  its absolute value over the last ``wobble_samples`` of them (robust: the fast early
  phase, whose differences are large, is ignored as soon as a quarter of the samples
  come after it; a 1,750-step run has only eight samples), as a standard deviation of
  the level (/0.3186 for a normal's lower quartile of absolute values, /sqrt 20 for a
  third difference). In the run's first window (``wobble_samples`` + 3 samples), a
  third difference that the next one, of the same sign, undercuts ``SHRINK`` (1.5) times
  is dropped: that is a descent's curvature still shrinking, not a wobble (a wobble's
  consecutive third differences are anti-correlated, -0.75: they seldom share a sign,
  let alone shrink together); a short run otherwise measured its wobble inside its fast
  early descent, at ~19x ``rho`` x progress. In that window the wobble counted is also
  at most one point's scatter (``noise``, what stands in before the wobble is measured):
  a third difference larger than that there is a descent's curvature that did not
  shrink 1.5x a sample (constant-lr Adam, a one-cycle schedule), not yet a wobble; after
  it, the estimate counts in full. Frozen while a deviation is being judged
  (``judging=True``), so a building failure does not raise its own bar.

A deviation of ``effect`` loss units may page when ``effect > gate * unit`` (a level's
deviation: drift, plateau, divergence) or ``effect > jump_gate * unit`` (one point's
jump: a sustained spike, a resume's jump), with
``unit = max(rho * progress, wobble)``: it must be a material fraction of the run's own
progress *and* several times its own low-frequency wobble. Both are differences of
losses, so an offset changes nothing and a scale changes both sides alike; a loss that
fell from 1 to 1e-4 has a progress of ~1, so a change of 1e-4 is never a page. A loss
that is not meant to fall (``falls=False``, the ``stationary`` preset: an RL value loss, a
GAN's) has no progress to measure against: its unit is its own wobble alone.
A stall (``plateau`` slowdown) pages only when its shortfall passes ``gate`` *and* the
decline its earlier pace promised since the onset is over ``stall_gate`` times what the
level did fall: a run that merely slowed down keeps a good part of its decline.
``gate``, ``jump_gate`` and ``stall_gate`` are chosen by a written procedure from clean
real runs of other sources (tests/bench/calibrate.py); ``rho`` is fixed (docs/DETECTION.md). One
point's jump is also judged against one point's scatter (``noise``, from the absolute
one-step changes), and so is everything until the wobble has been measured (two kept third
differences of the level): a young run's level is judged as conservatively as a point.

>>> import random
>>> rng, det = random.Random(0), EffectDetector()
>>> for t in range(1, 3001):
...     st = det.update(t, 3 + 8 * t ** -0.5 + rng.gauss(0, 0.05))
>>> round(st.progress, 1), st.wobble < 0.05, det.pages(0.5 * st.progress), det.pages(0.001)
(7.9, True, True, False)
"""

from __future__ import annotations

import math
from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

if not cython.compiled:       # compiled: libc's, cimported in effect.pxd
    from math import isfinite, sqrt

from . import base
from .base import Detector, check, gap_decay, positive, register
from .finding import Verdict

INF = cython.declare(cython.double, math.inf)
SHRINK = cython.declare(cython.double, 1.5)   # a third difference this many times the next one
NAN = cython.declare(cython.double, base.NAN)              # a float state with no value yet
NO_STEP = cython.declare(cython.longlong, base.NO_STEP)    # a step state with no step yet
_new = tuple.__new__     # a state without the NamedTuple's Python-level __new__


class EffectState(NamedTuple):
    step: int
    level: float
    progress: float
    wobble: float
    unit: float          # max(rho * progress, wobble): a level's deviation is judged in it
    noise: float = 0.0   # one point's scatter (sd): a jump is judged in max(unit, noise)


@cython.cclass
class EffectDetector(Detector):
    """Fields typed in effect.pxd. ``feed`` is the monitor's per-event path; ``level``,
    ``best``, ``progress``, ``unit``, ``noise`` and ``score``, ``fast_rise``,
    ``forecast_rise`` read what it needs without building a state."""

    name = "effect"
    FEED = "last"      # the gate's yardsticks: it judges the others' verdicts, asks for none

    def see(self, p) -> None:
        self._feed(p.s, p.x, p.judging, p.l_pred, p.lr)
    ARGS = ("gate", "jump_gate", "stall_gate", "rho", "halflife", "min_points",
            "wobble_samples", "start_points", "clip", "falls")
    STATE = ("_n", "_first", "_last", "_dt", "_noise", "_prev", "_level", "_fast", "_start",
             "_best", "_lags", "_next", "_k", "_kw", "_pred_best", "_lr_peak", "_lr_low",
             "_devs", "_wob", "_lr_up")
    OPTIONAL = ("_first", "_last", "_prev")    # None until the first point

    def __init__(self, *, gate: float = 4.0, jump_gate: float = 4.0, stall_gate: float = 6.0,
                 rho: float = 0.0025,
                 halflife: float = 100.0,
                 min_points: int = 8, wobble_samples: int = 16, start_points: int = 10,
                 clip: float = 4.0, falls: bool = True) -> None:
        for n in ("gate", "jump_gate", "rho", "halflife", "clip"):
            positive(n, locals()[n])
        check(isinstance(falls, bool), "falls", falls, "a bool (is the loss meant to fall?)")
        self.falls = falls
        check(isinstance(stall_gate, (int, float)) and not isinstance(stall_gate, bool)
              and stall_gate >= 1.0, "stall_gate", stall_gate,
              "a float >= 1 (expected decline over observed)")
        self.stall_gate = stall_gate
        for n in ("min_points", "wobble_samples", "start_points"):
            check(isinstance(locals()[n], int) and locals()[n] >= 1, n, locals()[n], "an int >= 1")
        self.gate, self.jump_gate, self.rho = gate, jump_gate, rho
        self.halflife, self.min_points = halflife, min_points
        self.wobble_samples, self.start_points, self.clip = wobble_samples, start_points, clip
        self._c_tau, self._c_g = NAN, 1.0   # cache: the per-step weight at half-life _c_tau
        self._n = 0
        self._first = NO_STEP
        self._last = NO_STEP
        self._dt = 1.0            # EWMA of the gap between points (steps)
        self._noise = 0.0         # EWMA of |one-step change|: winsorizing scale
        self._prev = NAN
        self._level = 0.0         # EWMA of the loss
        self._fast = 0.0          # the same at a fifth of the half-life: abrupt shifts
        self._start = -INF
        self._best = INF
        self._lags = [0.0, 0.0, 0.0]   # the level tau, 2 tau and 3 tau ago
        self._next = 0.0          # step of the next sample of the level
        self._k = 0               # samples taken
        self._kw = 0              # of them, in the wobble
        self._pred_best = INF     # the lowest forecast seen (monitor: a rise the schedule explains)
        self._lr_peak = 0.0       # the highest lr seen, and the lowest once it fell
        self._lr_low = INF
        self._lr_up = False       # the lr rose at the last point, above every earlier one
        self._devs = []           # the last wobble_samples |third differences|
        self._wob = 0.0           # their lower quartile

    def update(self, step: int, loss: float, judging: bool = False,
               l_pred: float | None = None, lr: float | None = None) -> EffectState:
        self.feed(step, loss, judging, l_pred, lr)
        return self.state(step)

    def feed(self, step: int, loss: float, judging: bool = False,
             l_pred: float | None = None, lr: float | None = None) -> None:
        """`update` without building a state (the monitor's per-event path)."""
        self._feed(step, loss, judging, l_pred, lr)

    @cython.locals(last=cython.longlong, v=cython.double, dt=cython.longlong,
                   usual=cython.double, n=cython.longlong, d=cython.double,
                   noise=cython.double, x=cython.double, cap=cython.double, tau=cython.double,
                   g=cython.double, gf=cython.double, level=cython.double, clip=cython.double,
                   halflife=cython.double, min_points=cython.longlong,
                   start_points=cython.longlong)
    def _feed(self, step: int, loss: float, judging: bool, l_pred: float | None,
              lr: float | None) -> int:
        last = self._last
        if step <= last or not isfinite(loss):    # (before the first point last is NO_STEP)
            return 0
        if lr is not None:
            v = lr
            if v == v:                             # the lowest lr since the warm-up's peak
                self._lr_up = v > self._lr_peak
                if v >= self._lr_peak:
                    self._lr_peak = v
                elif v < self._lr_low:
                    self._lr_low = v
        if l_pred is not None:
            v = l_pred
            if v < self._pred_best:
                self._pred_best = v
        if last == NO_STEP:
            self._first, self._last, self._prev, self._n = step, step, loss, 1
            self._level = self._start = self._fast = loss
            return 0
        dt = step - last
        self._last = step
        usual = self._dt
        self._dt = usual + 0.05 * (dt - usual)
        n = self._n = self._n + 1
        d = loss - self._prev
        if d < 0.0:
            d = -d
        self._prev = loss
        noise = self._noise
        if noise == 0.0:
            noise = d
        else:                                      # a mean, then an EWMA
            noise += (1.0 / n if n < 50 else 0.02) * ((d if d < 4 * noise else 4 * noise) - noise)
        self._noise = noise
        clip, halflife = self.clip, self.halflife          # the arguments as C values
        min_points, start_points = self.min_points, self.start_points
        x, cap = loss, self._level + clip * noise
        if noise > 0.0 and x > cap:
            x = cap                                # one-batch outliers do not move the level
        tau = min_points * self._dt
        if tau < halflife:
            tau = halflife
        if dt == 1 and tau == self._c_tau:
            g = self._c_g                          # the per-step weight, cached
        else:
            g = gap_decay(dt, usual, tau)
            if dt == 1:
                self._c_tau, self._c_g = tau, g
        level = self._level = g * self._level + (1 - g) * x
        gf = gap_decay(dt, usual, 0.2 * tau)
        self._fast = gf * self._fast + (1 - gf) * x
        if n <= start_points:
            if level > self._start:
                self._start = level
        elif level < self._best:
            self._best = level
        if step >= self._next:
            self._sample(level, judging)
            self._next = step + 2.0 * tau

    @cython.locals(devs=list, srt=list, q=cython.double, i=cython.Py_ssize_t, d=cython.double,
                   l1=cython.double, l2=cython.double, l3=cython.double)
    def _sample(self, level: float, judging: bool) -> None:
        l1, l2, l3 = self._lags
        self._lags = [level, l1, l2]
        self._k += 1
        if self._k < 4 or judging:
            return
        d = level - 3.0 * l1 + 3.0 * l2 - l3
        devs = self._devs
        if self._first_window():
            while devs and devs[-1] * d > 0.0 and abs(devs[-1]) > SHRINK * abs(d):
                del devs[-1]     # the descent's curvature, still shrinking: not a wobble
        devs.append(d)
        if len(devs) > self.wobble_samples:
            del devs[0]
        self._kw = len(devs)
        srt = sorted([abs(v) for v in devs])
        q = 0.25 * (len(srt) - 1)              # the lower quartile, interpolated
        i = int(q)
        self._wob = srt[i] + (q - i) * (srt[min(i + 1, len(srt) - 1)] - srt[i])

    @cython.locals(progress=cython.double, wobble=cython.double, noise=cython.double,
                   unit=cython.double, rho=cython.double)
    def state(self, step: int) -> EffectState:
        """The current level, progress, wobble (sd) and unit, without updating."""
        if self._first == NO_STEP:
            return _new(EffectState, (step, 0.0, 0.0, 0.0, INF, INF))
        progress = max(self._start - self._best, 0.0) if self._best < INF else 0.0
        wobble = self._wob / (0.3186 * 4.4721)     # sd of the level, from |3rd difference|
        noise = 0.8862 * self._noise               # sd from E|x_t - x_t-1| = 2 sd / sqrt(pi)
        rho = self.rho if self.falls else 0.0
        unit = max(rho * progress, self._wobble(wobble, noise))
        return _new(EffectState, (step, self._level, progress, wobble, unit, noise))

    @property
    def level(self) -> float:
        return self._level

    @property
    def best(self) -> float:
        return self._best

    @property
    def start(self) -> float:
        """The level the run started from (its first window's)."""
        return self._start

    @property
    def lr_peak(self) -> float:
        """The largest lr seen (0.0 while none was sent)."""
        return self._lr_peak

    @property
    def lr_rising(self) -> bool:
        """The lr rose at the last point above every lr before it: a warm-up that has not
        given the run its lr yet (False while none was sent)."""
        return self._lr_up

    @property
    def spacing(self) -> float:
        """The usual gap between the points, in steps (an EWMA)."""
        return self._dt

    @property
    def progress(self) -> float:
        """How far the run has come, ``start - best``: ``state().progress`` without a state
        (0 for a loss not meant to fall: its pages say their size in loss units alone)."""
        return self._progress() if self._first != NO_STEP and self.falls else 0.0

    @property
    def unit(self) -> float:
        """``state().unit`` without a state."""
        return self._unit() if self._first != NO_STEP else INF

    def _progress(self) -> float:
        return max(self._start - self._best, 0.0) if self._best < INF else 0.0

    @cython.locals(rho=cython.double)
    def _unit(self) -> float:
        """``state().unit``: max(rho * progress, wobble), one point's scatter until the
        wobble is measured (the sds as in `state`)."""
        rho = self.rho if self.falls else 0.0
        return max(rho * self._progress(),
                   self._wobble(self._wob / (0.3186 * 4.4721), 0.8862 * self._noise))

    def _wobble(self, wobble: float, noise: float) -> float:
        """The wobble the unit counts (sds of the level): one point's scatter (``noise``)
        until two third differences are kept; in the run's first window, at most that
        scatter: a third difference that large there is the descent's curvature that did
        not shrink 1.5x a sample (a one-cycle or constant-lr descent), not yet a wobble."""
        if self._kw < 2:
            return noise
        return min(wobble, noise) if self._first_window() else wobble

    def _first_window(self) -> bool:
        """The run's first ``wobble_samples`` + 3 samples: its descent."""
        return self._k <= self.wobble_samples + 3

    @cython.locals(a=cython.double, sd=cython.double, halflife=cython.double,
                   min_points=cython.longlong)
    def fast_rise(self) -> float:
        """The fast level (a fifth of the half-life) above the best, less two of its own
        standard deviations: an abrupt shift's size, before the slow level carries it."""
        if self._best == INF:
            return 0.0
        halflife, min_points = self.halflife, self.min_points
        a = 1.0 - 0.5 ** (self._dt / (0.2 * max(halflife, min_points * self._dt)))
        sd = 0.8862 * self._noise * sqrt(a / (2.0 - a))
        return self._fast - self._best - 2.0 * sd

    @cython.locals(x=cython.double)
    def forecast_rise(self, l_pred: float | None, lr: float | None) -> float:
        """How far the forecast now stands above its lowest value, while the lr is back
        above twice its lowest value since its peak (a warm restart); else 0: the part
        of a rise that the learning-rate schedule explains. A refit that absorbed a
        drift also raises the forecast; without an lr going back up, it explains nothing."""
        if l_pred is None or self._pred_best == INF or lr is None:
            return 0.0
        x = lr
        if not x > 2.0 * self._lr_low:
            return 0.0
        x = l_pred
        return max(x - self._pred_best, 0.0)

    @cython.locals(unit=cython.double)
    def score(self, effect: float, jump: bool = False) -> float:
        """``effect`` (loss units) in units of ``unit`` (``jump``: of max(unit, noise))."""
        if self._first == NO_STEP:
            return 0.0                             # no unit yet
        unit = self._unit()
        if jump:
            unit = max(unit, 0.8862 * self._noise)
        if unit == INF or self._n < 3:
            return 0.0
        return effect / unit if unit > 0 else (INF if effect > 0 else 0.0)

    def pages(self, effect: float, jump: bool = False) -> bool:
        """May a deviation of ``effect`` loss units page (``jump``: one point's jump)?"""
        return self.score(effect, jump) > (self.jump_gate if jump else self.gate)


register(EffectDetector)
