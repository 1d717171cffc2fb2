"""`plateau`: learning stopped: no progress since the start, a slope that collapsed, or
flat where the forecast falls.

Four rules:

- *frozen*: the loss has repeated one value, to single precision, for ``frozen_points``
  points in a row (at increasing steps): the logger stopped updating, or the network
  died (two MLPerf Mask R-CNN runs printed one value for 36,000 iterations after a NaN
  their meters hid, while the lr moved on). A healthy loss does not repeat itself to
  the last digit 20 times, unless the log rounds it (`resolution`) and it moves by less
  than a printed digit a point: a value that came within two printed digits of the one
  before it is not frozen (a fine-tune that memorizes sits at 0.0002, printed at 4
  decimals), one that jumped there is (an fp16 run whose trainer turns NaN into a flat
  0.0), and so is a value repeated in a log that is not rounded. A value repeated from
  the first point on is no loss that stopped but one that has not moved yet: *no
  learning* judges it (a DPO or reward-model loss is exactly ln 2 while the policy
  equals its reference, on every batch, until the warm-up's lr moves it; a loss printed
  0.0 from the start).
- *no learning* (on ``level``, an EWMA of the loss, half-life ``halflife`` steps): from
  ``grace`` steps after the first point (and at least ``min_points`` points) on, the
  best level is both less than ``min_progress`` (a fraction) below the starting level
  and less than ``min_progress_z`` noise units below it. The starting level is the
  highest level of the first 10% of ``grace``; a noise unit is the level's own
  point-to-point scatter (an EWMA of its absolute second differences / sqrt 2, so that a
  trend is not counted as scatter). This is what catches a run that never learns, even
  from a few eval points.

  The noise test alone would not read the loss's offset (a loss + 1000 that moved many
  times its noise is learning). The fraction does, by necessity: a run that barely learns
  (a t5 fine-tune, 1.99 to 1.74 in 215k steps) and one that never did (an MLPerf BERT,
  8.01 to 7.98) both moved a few to 20 times their scatter; they differ by the fraction
  they fell (12% and 0.4%), which an offset destroys (docs/DETECTION.md, Known limits).
- *slowdown* (rule ``"slowdown"``): the loss's slope in log-step, ``b`` (a weighted
  least-squares line of loss on ``ln step`` whose weights halve every ``slow_halflife`` x
  step steps, so the window scales with the run), has fallen below ``slow_keep`` times
  its value ``slow_ratio`` x earlier in step, by more than ``slow_z`` standard errors
  (noise from the line's own residuals, upward outliers winsorized at ``clip``). Armed
  only while the slope has not steepened (by ``accel_z`` standard errors) anywhere in the
  ``slow_span`` log-intervals before that reference: a decelerating, power-law-like
  regime, where a collapse of the slope is a stagnation and not the end of a fast phase
  (a BERT-style drop, a warm-down); and only when the reference decline is material: at
  least ``slow_effect`` noise units per ``slow_ratio`` interval, less ``accel_z`` of its
  standard errors (a reference measured on few points is uncertain: logged every 10th
  step, the unknown BERT ``dgx1_result9`` drew a reference 1.6 standard errors steeper
  than at full resolution, which armed the rule on a 0.09 rise). Needs ``slow_warmup``
  steps and a window of ``slow_points`` (weighted) points; ``slowdown=False`` turns the
  rule off (the finetuning preset: an exponential approach to a floor is a collapsing
  slope by design). O(1) per update: eight running sums re-centred on the current
  ``ln step``, and a ring of slopes every 0.05 in ``ln step`` (about 30 entries).
- *stagnation*: the forecast (passed in as ``l_pred``) fell over the last ``window``
  steps while the level moved (either way) by less than ``flat`` times that drop, and
  the forecast detector is alerting (``deviating``): a drift that is a flat line.

>>> import random
>>> rng, det = random.Random(1), PlateauDetector()
>>> next(s for s in range(586, 20000, 586) if det.update(s, 8.0 - 1e-6 * s + rng.gauss(0, 0.003)).active)
4102
>>> rng, det = random.Random(3), PlateauDetector()
>>> law = lambda t: 3.0 + 6.0 * t ** -0.3
>>> hit = next(t for t in range(1, 30001)
...            if det.update(t, law(min(t, 8000)) + rng.gauss(0, 0.05)).active)
>>> 8000 < hit < 14000
True
"""

from __future__ import annotations

import math
from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

if not cython.compiled:       # compiled: libc's, cimported in plateau.pxd
    from math import exp, isfinite, log

from . import base
from .base import check, decay, fraction, positive, register
from .finding import Verdict
from .plateau_slope import PlateauSlope
from .resolution import NONE, RAW as _RAW, decimals, quantum

INF = cython.declare(cython.double, math.inf)
NAN = cython.declare(cython.double, base.NAN)              # a float state with no value yet
NO_STEP = cython.declare(cython.longlong, base.NO_STEP)    # a step state with no step yet
# in a log that is not rounded, a repeat is the same value to single precision (2^-23 of
# it, float32's spacing): a dead network's loss that averages float32 values varies in its
# ninth digit only (a PINN sat at 0.51090220(5-6) for 6,000 steps after a blow-up)
SINGLE = cython.declare(cython.double, 2.0 ** -23)
RAW = cython.declare(cython.longlong, _RAW)
_new = tuple.__new__     # a state without the NamedTuple's Python-level __new__


class PlateauState(NamedTuple):
    step: int
    active: bool
    rule: str | None       # "frozen", "no_learning", "slowdown" or "stagnation"
    progress: float        # fraction fallen from the starting level
    level: float
    slow_z: float = 0.0    # the slowdown statistic (standard errors; -inf while disarmed)
    shortfall: float = 0.0  # loss units: the level above where its earlier pace would be
    repeats: int = 0        # "frozen": points in a row at one exact value
    progress_z: float = 0.0  # the progress in units of the level's point-to-point scatter
    expected: float = 0.0   # "slowdown": loss units its earlier pace would have fallen since
    observed: float = 0.0   # the onset (``onset``), and what the level did fall
    onset: int = 0          # "slowdown": the step the slope collapsed at


@cython.cclass
class PlateauDetector(PlateauSlope):
    """Fields typed in plateau_slope.pxd (the base class `PlateauSlope` holds the learned
    state and the slope's regression; this class the arguments and the rules of
    `observe`). `observe` is `update` without a state: the values of
    its last call are attributes named like `PlateauState`'s fields, but for ``slow_z``
    (the argument of that name is the threshold): the statistic is ``z``.

    The state keeps its shape: the C fields behind ``_sums``, ``_armed``, ``_onset``,
    ``_hole`` (lists, or None) and ``_last_n`` (-inf before the first point) are read and
    written as such by properties; ``_slopes`` and ``_ring`` are lists, with a C copy of
    the entries the per-update path reads."""

    name = "plateau"
    FEED, KIND = "trend", "plateau"

    def see(self, p) -> None:
        self._observe(p.s, p.x, p.l_pred, p.fc_alert)

    def verdict(self) -> Verdict:
        """Learning stopped (``facts["rule"]``: no_learning, frozen, slowdown, stagnation)."""
        return Verdict("plateau", self.active, "warning", self.shortfall, self.window,
                       self.onset, {"rule": self.rule, "level": self.level,
                                    "observed": self.observed, "expected": self.expected})
    ARGS = ("grace", "min_progress", "min_points", "window", "flat", "halflife",
            "slow_halflife", "slow_ratio", "slow_span", "slow_keep", "slow_z", "accel_z",
            "slow_warmup", "slow_points", "slow_effect", "clip", "slowdown", "frozen_points",
            "min_progress_z")
    STATE = ("_lnoise", "_same", "_prev", "_level", "_last_n", "_dprev", "_first", "_last",
             "_ref", "_best", "_n", "_ring", "_dt", "_sums", "_u", "_t", "_noise", "_slopes",
             "_armed", "_slow", "_onset", "_hole", "_before", "_dec")
    OPTIONAL = ("_prev", "_level", "_dprev", "_first", "_last", "_u", "_before")

    def __init__(self, *, grace: int = 3000, min_progress: float = 0.02, min_points: int = 4,
                 window: int = 1000, flat: float = 0.25, halflife: float = 50.0,
                 slow_halflife: float = 0.15, slow_ratio: float = 1.6, slow_span: int = 3,
                 slow_keep: float = 0.5, slow_z: float = 3.0, accel_z: float = 3.0,
                 slow_warmup: int = 100, slow_points: float = 50.0, slow_effect: float = 0.6,
                 clip: float = 4.0, slowdown: bool = True, frozen_points: int = 20,
                 min_progress_z: float = 20.0) -> None:
        for n in ("grace", "window", "min_points", "slow_span", "slow_warmup", "frozen_points"):
            check(isinstance(locals()[n], int) and locals()[n] >= 1, n, locals()[n], "an int >= 1")
        for n in ("min_progress", "flat", "slow_halflife", "slow_keep"):
            fraction(n, locals()[n])
        for n in ("halflife", "slow_z", "accel_z", "slow_points", "slow_effect", "clip",
                  "min_progress_z"):
            positive(n, locals()[n])
        check(isinstance(slowdown, bool), "slowdown", slowdown, "a bool")
        check(isinstance(slow_ratio, float) and 1.0 < slow_ratio <= 4.0, "slow_ratio", slow_ratio,
              "a float in (1, 4]")
        self.grace, self.min_progress, self.min_points = grace, min_progress, min_points
        self.min_progress_z = min_progress_z
        self.window, self.flat, self.halflife = window, flat, halflife
        self.slow_halflife, self.slow_ratio, self.slow_span = slow_halflife, slow_ratio, slow_span
        self.slow_keep, self.slow_z, self.accel_z = slow_keep, slow_z, accel_z
        self.slow_warmup, self.slow_points, self.clip = slow_warmup, slow_points, clip
        self.slow_effect, self.slowdown, self.frozen_points = slow_effect, slowdown, frozen_points
        # the float arguments, typed (the ints and the bool are typed as they are)
        self._c_min_progress, self._c_min_progress_z = min_progress, min_progress_z
        self._c_flat, self._c_halflife, self._c_slow_halflife = flat, halflife, slow_halflife
        self._c_slow_keep, self._c_slow_z, self._c_accel_z = slow_keep, slow_z, accel_z
        self._c_slow_points, self._c_slow_effect, self._c_clip = slow_points, slow_effect, clip
        self._lnoise = 0.0     # EWMA of |change of the level| between points
        self._same = 0         # points in a row equal to the one before, to the last digit
        self._prev = NAN
        self._before = NAN     # the value before the one repeated (NaN: repeated from the start)
        self._dec = NONE       # the decimals the log prints (`resolution`)
        self._c_lr = math.log(slow_ratio)
        self._c_level = 0.5 ** (1.0 / halflife)     # per-step EWMA weight (a constant)
        self._level = NAN
        self._v_last_n = NO_STEP   # step of the last point in the level's noise (-inf: none)
        self._dprev = NAN          # the level's last change
        self._first = NO_STEP
        self._last = NO_STEP
        self._ref = -INF
        self._best = INF
        self._n = 0
        self._ring = []        # [step, level, l_pred] every window/8 steps, 9 at most
        self._dt = 1.0         # EWMA of the gap between points in the line (steps)
        self.step, self.active, self.rule, self.progress, self.level = 0, False, None, 0.0, 0.0
        self.z, self.shortfall, self.repeats, self.progress_z = 0.0, 0.0, 0, 0.0
        self.expected = self.observed = 0.0
        self.onset = 0
        self._reset_slope()

    def update(self, step: int, loss: float, l_pred: float | None = None,
               deviating: bool = False) -> PlateauState:
        self.observe(step, loss, l_pred, deviating)
        return self.state()

    def state(self) -> PlateauState:
        """The last `observe` as a state (what `update` returns): for a message, not per event."""
        return _new(PlateauState, (self.step, self.active, self.rule, self.progress, self.level,
                                   self.z, self.shortfall, self.repeats, self.progress_z,
                                   self.expected, self.observed, self.onset))

    @cython.locals(q=cython.double)
    def _benign_repeats(self, loss: float) -> bool:
        """The repeats are no loss that stopped: in a rounded log, the value came within two
        printed digits of the one before it; or it has not moved since the first point."""
        q = quantum(self._dec)
        if self._before != self._before:
            return True
        return q > 0.0 and abs(loss - self._before) <= 2.0 * q

    def observe(self, step: int, loss: float, l_pred: float | None = None,
                deviating: bool = False) -> bool:
        """`update` without building a state: returns ``active``; the other fields are
        attributes (``z`` for ``slow_z``)."""
        return self._observe(step, loss, l_pred, deviating)

    @cython.locals(z=cython.double, dt=cython.longlong, g=cython.double, prev=cython.double,
                   level=cython.double, a=cython.double, age=cython.longlong, ref=cython.double,
                   progress=cython.double, sd=cython.double, pz=cython.double,
                   short=cython.double, slow=cython.bint)
    def _observe(self, step: int, loss: float, l_pred: float | None, deviating: bool) -> bool:
        self.step = step
        self.shortfall = self.progress_z = self.expected = self.observed = 0.0
        self.repeats = self.onset = 0
        if not isfinite(loss):
            self.active, self.rule, self.progress, self.z = False, None, 0.0, 0.0
            self.level = self._level if self._level == self._level and self._level != 0.0 else 0.0
            return False
        self._n += 1
        if self._first == NO_STEP:
            self._level, self._first, self._last = loss, step, step
        if step < self._last:
            self._reset_slope()
        if step > self._last:
            if loss == self._prev or (self._dec >= RAW and abs(loss - self._prev) <= SINGLE * abs(loss)):
                self._same += 1
            else:
                self._same, self._before = 0, self._prev
            self._prev = loss
            if self._dec < RAW:
                self._dec = decimals(self._dec, loss)
        z = self._slowdown(step, loss) if self.slowdown and step + 1.0 > self._t else -INF
        self.z = z
        dt = step - self._last
        g = self._c_level if dt == 1 else decay(dt, self._c_halflife)
        self._last = step
        prev = self._level
        level = self._level = g * self._level + (1 - g) * loss
        if step > self._v_last_n:       # second differences: a trend is not scatter
            if self._dprev == self._dprev:
                a = 1.0 / self._n if self._n < 20 else 0.05
                self._lnoise += a * (abs((level - prev) - self._dprev) * 0.7071 - self._lnoise)
            self._dprev = level - prev
            self._v_last_n = step
        age = step - self._first
        if age <= 0.1 * self.grace and level > self._ref:
            self._ref = level
        if level < self._best:
            self._best = level
        ref = self._ref
        progress = (ref - self._best) / (abs(ref) if abs(ref) > 1e-12 else 1e-12)
        self.progress = progress
        if self._same + 1 >= self.frozen_points and not self._benign_repeats(loss):
            self.active, self.rule, self.level, self.repeats = True, "frozen", loss, self._same + 1
            return True
        self.level = level
        if age >= self.grace and self._n >= self.min_points and progress < self._c_min_progress:
            sd = 0.8862 * self._lnoise        # no scatter at all: the fraction decides
            pz = (ref - self._best) / sd if sd > 0.0 else 0.0
            if pz < self._c_min_progress_z:
                self.active, self.rule, self.progress_z = True, "no_learning", pz
                return True
        short = self._shortfall(step, level) if self._on_u == self._on_u else 0.0
        slow = z > self._c_slow_z or (self._slow and (z > 0.0 or short > 0.0))
        if slow and not self._slow and self._arm_b == self._arm_b:
            self._on_u, self._on_level = log(step + 1.0), level
            self._on_slope, self._on_r = self._arm_b, self._arm_r
        self._slow = slow
        if not slow and self._on_u == self._on_u:
            self._on_u = self._on_level = self._on_slope = self._on_r = NAN
        if self._slow:
            self.active, self.rule, self.shortfall = True, "slowdown", short
            if self._on_u == self._on_u:
                self.observed = self._on_level - level
                self.expected = short + self.observed
                self.onset = int(exp(self._on_u) - 0.5)
            return True
        if self._stagnant(step, l_pred) and deviating:
            self.active, self.rule = True, "stagnation"
            return True
        self.active, self.rule = False, None
        return False


register(PlateauDetector)
