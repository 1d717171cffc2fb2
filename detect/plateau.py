"""`plateau`: learning stopped: no progress since the start, a slope that collapsed, or
flat where the forecast falls.

Four rules:

- *frozen*: the loss has repeated one exact value for ``frozen_points`` points in a
  row (at increasing steps): the logger stopped updating (two MLPerf Mask R-CNN runs
  printed one value for 36,000 iterations after a NaN their meters hid, while the lr
  moved on). A healthy loss does not repeat itself to the last digit 20 times.

- *no learning* (on ``level``, an EWMA of the loss, half-life ``halflife`` steps):
  ``grace`` steps after the first point (and at least ``min_points`` points), the best
  level is less than ``min_progress`` (a fraction) below the starting level *and* less
  than ``min_progress_z`` noise units below it (the level's own point-to-point scatter,
  an EWMA of its absolute second differences / sqrt 2, so that a trend is not counted as
  scatter: a run that moved by many times its noise is learning,
  whatever its offset, so a loss + 1000 is not "no learning". The fraction is the one
  thing here that reads the loss's level, by necessity: a run that barely learns (a t5
  fine-tune, 1.99 to 1.74 in 215k steps) and one that never did (an MLPerf BERT, 8.01 to
  7.98) are both a few to 20 times their scatter; they differ by the fraction they fell
  (12% and 0.4%), which an offset destroys; the highest
  level of the first 10% of ``grace``). This is what catches a run that never learns,
  even from a few eval points.
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
except ImportError:            # no Cython: the pure build runs (detect/_cython_shim.py)
    from . import _cython_shim as cython

if not cython.compiled:       # compiled: libc's and base's C values, cimported in plateau.pxd
    from math import exp, isfinite, log, sqrt

    from .base import _GAP

from . import base
from .base import Detector, check, decay, fraction, positive, register

_GRID = cython.declare(cython.double, 0.05)     # ln-step spacing of the slope ring
INF = cython.declare(cython.double, math.inf)
NAN = cython.declare(cython.double, base.NAN)              # a float state with no value yet
NO_STEP = cython.declare(cython.longlong, base.NO_STEP)    # a step state with no step yet
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
class PlateauDetector(Detector):
    """Fields typed in plateau.pxd. `observe` is `update` without a state: the values of
    its last call are attributes named like `PlateauState`'s fields, but for ``slow_z``
    (the argument of that name is the threshold): the statistic is ``z``.

    The state keeps its shape: the C fields behind ``_sums``, ``_armed``, ``_onset``,
    ``_hole`` (lists, or None) and ``_last_n`` (-inf before the first point) are read and
    written as such by properties; ``_slopes`` and ``_ring`` are lists, with a C copy of
    the entries the per-update path reads."""

    name = "plateau"
    ARGS = ("grace", "min_progress", "min_points", "window", "flat", "halflife",
            "slow_halflife", "slow_ratio", "slow_span", "slow_keep", "slow_z", "accel_z",
            "slow_warmup", "slow_points", "slow_effect", "clip", "slowdown", "frozen_points",
            "min_progress_z")
    STATE = ("_lnoise", "_same", "_prev", "_level", "_last_n", "_dprev", "_first", "_last",
             "_ref", "_best", "_n", "_ring", "_dt", "_sums", "_u", "_t", "_noise", "_slopes",
             "_armed", "_slow", "_onset", "_hole")
    OPTIONAL = ("_prev", "_level", "_dprev", "_first", "_last", "_u")

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

    def _reset_slope(self) -> None:
        # W, Wu, Wuu, Wy, Wuy (weights w), V, Vu, Vuu (weights w^2): `_sums`
        self._sW = self._sWu = self._sWuu = self._sWy = self._sWuy = 0.0
        self._sV = self._sVu = self._sVuu = 0.0
        self._u = NAN            # ln(step + 1) the sums are centred on
        self._t = 0.0            # step + 1 of that point
        self._noise = 0.0        # EWMA of |residual| from the line
        self._slopes = []        # [ln step, slope, se] every _GRID, slow_span intervals back
        self._arm_b = self._arm_se = self._arm_r = NAN   # `_armed`: [slope, se, r] of the
        #                          reference, when armed (NaN: not armed)
        self._slow = False
        self._on_u = self._on_level = self._on_slope = self._on_r = NAN  # `_onset`: [ln step,
        #                          level, reference slope, r] where a slowdown began
        self._hole_lo = self._hole_hi = NAN  # `_hole`: [ln step before, ln step after] a gap:
        #                          slopes straddling it are not kept, nor is a reference
        #                          taken from inside it

    # the state's shape in snapshots: lists, or None
    @property
    def _sums(self) -> list:
        return [self._sW, self._sWu, self._sWuu, self._sWy, self._sWuy, self._sV, self._sVu,
                self._sVuu]

    @_sums.setter
    def _sums(self, v: list) -> None:
        self._sW, self._sWu, self._sWuu, self._sWy, self._sWuy, self._sV, self._sVu, \
            self._sVuu = v

    @property
    def _armed(self) -> list | None:
        return None if self._arm_b != self._arm_b else [self._arm_b, self._arm_se, self._arm_r]

    @_armed.setter
    def _armed(self, v: list | None) -> None:
        self._arm_b, self._arm_se, self._arm_r = (NAN, NAN, NAN) if v is None else v

    @property
    def _onset(self) -> list | None:
        return None if self._on_u != self._on_u else [self._on_u, self._on_level,
                                                      self._on_slope, self._on_r]

    @_onset.setter
    def _onset(self, v: list | None) -> None:
        self._on_u, self._on_level, self._on_slope, self._on_r = (NAN,) * 4 if v is None else v

    @property
    def _hole(self) -> list | None:
        return None if self._hole_lo != self._hole_lo else [self._hole_lo, self._hole_hi]

    @_hole.setter
    def _hole(self, v: list | None) -> None:
        self._hole_lo, self._hole_hi = (NAN, NAN) if v is None else v

    @property
    def _last_n(self):
        return -INF if self._v_last_n == NO_STEP else self._v_last_n

    @_last_n.setter
    def _last_n(self, v) -> None:
        self._v_last_n = NO_STEP if v == -INF else v

    @property
    def _slopes(self) -> list:
        return self._v_slopes

    @_slopes.setter
    def _slopes(self, v: list) -> None:
        self._v_slopes = v
        self._slope_u = v[-1][0] if v else NAN

    @property
    def _ring(self) -> list:
        return self._v_ring

    @_ring.setter
    def _ring(self, v: list) -> None:
        self._v_ring = v
        self._ring_cache()

    def update(self, step: int, loss: float, l_pred: float | None = None,
               deviating: bool = False) -> PlateauState:
        self.observe(step, loss, l_pred, deviating)
        return self.state()

    def state(self) -> PlateauState:
        """The last `observe` as a state (what `update` returns): for a message, not per event."""
        return _new(PlateauState, (self.step, self.active, self.rule, self.progress, self.level,
                                   self.z, self.shortfall, self.repeats, self.progress_z,
                                   self.expected, self.observed, self.onset))

    @cython.locals(z=cython.double, dt=cython.longlong, g=cython.double, prev=cython.double,
                   level=cython.double, a=cython.double, age=cython.longlong, ref=cython.double,
                   progress=cython.double, sd=cython.double, pz=cython.double,
                   short=cython.double, slow=cython.bint)
    def observe(self, step: int, loss: float, l_pred: float | None = None,
                deviating: bool = False) -> bool:
        """`update` without building a state: returns ``active``; the other fields are
        attributes (``z`` for ``slow_z``)."""
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
            self._same = self._same + 1 if loss == self._prev else 0
            self._prev = loss
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
        if self._same + 1 >= self.frozen_points:
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

    @cython.locals(t=cython.double, u=cython.double, W=cython.double, Wu=cython.double,
                   Wuu=cython.double, Wy=cython.double, Wuy=cython.double, V=cython.double,
                   Vu=cython.double, Vuu=cython.double, g=cython.double, gap=cython.double,
                   d=cython.double, g2=cython.double, sxx=cython.double, fit=cython.double,
                   s=cython.double, r=cython.double, b=cython.double, mu=cython.double,
                   se=cython.double, k=cython.double, ref_b=cython.double, ref_se=cython.double)
    def _slowdown(self, step: int, loss: float) -> float:
        t = step + 1.0
        u = log(t)
        W, Wu, Wuu, Wy, Wuy = self._sW, self._sWu, self._sWuu, self._sWy, self._sWuy
        V, Vu, Vuu = self._sV, self._sVu, self._sVuu
        g = 1.0
        if self._u == self._u:    # re-centre on u (older points get u' = u_old - u), then decay
            gap = t - self._t
            if gap > _GAP * self._dt:   # a pause or a resume's rewind: the slopes straddle it
                # until the points before it weigh a quarter (two half-lives of the weights)
                self._hole_lo, self._hole_hi = self._u, log(t * (1.0 + 2.0 * self._c_slow_halflife))
            self._dt += 0.05 * (gap - self._dt)
            d = u - self._u
            g = 0.5 ** ((t - self._t) / (self._c_slow_halflife * t))
            g2 = g * g
            Wuu, Wu, Wuy = (Wuu - 2 * d * Wu + d * d * W) * g, (Wu - d * W) * g, (Wuy - d * Wy) * g
            W, Wy = W * g, Wy * g
            Vuu, Vu, V = (Vuu - 2 * d * Vu + d * d * V) * g2, (Vu - d * V) * g2, V * g2
        self._u, self._t = u, t
        sxx = Wuu - Wu * Wu / W if W > 2.0 else 0.0
        if sxx > 0.0:             # residual of this point from the line so far (at u' = 0)
            fit = (Wy - (Wuy - Wu * Wy / W) / sxx * Wu) / W
            s = 1.2533 * self._noise
            r = loss - fit
            if s > 0.0 and r > self._c_clip * s:
                r = self._c_clip * s
                loss = fit + r
            self._noise = g * self._noise + (1 - g) * abs(r) if self._noise > 0 else abs(r)
        W, Wy = W + 1.0, Wy + loss
        V += 1.0
        self._sW, self._sWu, self._sWuu, self._sWy, self._sWuy = W, Wu, Wuu, Wy, Wuy
        self._sV, self._sVu, self._sVuu = V, Vu, Vuu
        if step < self.slow_warmup or W < self._c_slow_points or self._noise <= 0.0 or (
                self._hole_lo == self._hole_lo and u < self._hole_hi):
            return -INF
        sxx = Wuu - Wu * Wu / W
        if sxx <= 0.0:
            return -INF
        b = (Wuy - Wu * Wy / W) / sxx
        mu = Wu / W
        s = 1.2533 * self._noise
        se = s * sqrt(max(Vuu - 2 * mu * Vu + mu * mu * V, 0.0)) / sxx
        if self._slope_u != self._slope_u or u - self._slope_u >= _GRID:
            self._v_slopes.append([u, b, se])
            self._slope_u = u
            self._arm(u)
        k = self._c_slow_keep
        ref_b, ref_se = self._arm_b, self._arm_se
        if ref_b != ref_b or -(ref_b + self._c_accel_z * ref_se) * self._c_lr < self._c_slow_effect * s:
            return -INF           # no reference, or the decline it withholds is not surely material
        return (b - k * ref_b) / sqrt(se * se + k * k * ref_se * ref_se)

    @cython.locals(u0=cython.double, level0=cython.double, slope=cython.double,
                   r=cython.double, x=cython.double, lr=cython.double, pace=cython.double)
    def _shortfall(self, step: int, level: float) -> float:
        """Loss units the level stands above where the reference pace would have taken it
        from the slowdown's onset, decelerating as it did before (by ``r`` per interval,
        measured between the reference and the slope one interval before it): the size
        of a stagnation. A curve that was already flattening fast withholds little."""
        if self._on_u != self._on_u:
            return 0.0
        u0, level0, slope, r = self._on_u, self._on_level, self._on_slope, self._on_r
        slope *= r                # the reference is one interval back: its pace at the onset
        x = log(step + 1.0) - u0
        lr = self._c_lr
        pace = x if r >= 0.999 else (lr / log(max(r, 1e-6))) * (r ** (x / lr) - 1.0)
        return level - (level0 + slope * pace)

    @cython.locals(lr=cython.double, span=cython.double, ring=list, e=list, flat=list,
                   back2=list, armed=cython.bint, r=cython.double)
    def _arm(self, u: float) -> None:
        """Reference slope ``slow_ratio`` x back, if no steepening in the span before it."""
        lr = self._c_lr
        ring, span = self._v_slopes, lr * self.slow_span
        while len(ring) > 2 and u - ring[1][0] >= span:
            ring.pop(0)
        self._arm_b = self._arm_se = self._arm_r = NAN
        if u - ring[0][0] < 0.98 * span:
            return
        if self._hole_lo < u - lr < self._hole_hi:
            return                # the reference would be a slope from before a gap
        flat = None               # the least steep slope so far, oldest first
        back2 = None              # the slope about two intervals back
        armed = False
        for e in ring:
            if u - e[0] < lr:
                break
            if flat is not None and (flat[1] - e[1]) > self._c_accel_z * math.hypot(flat[2], e[2]):
                self._arm_b = self._arm_se = NAN
                return            # the slope steepened: not a decelerating regime
            if flat is None or e[1] > flat[1]:
                flat = e
            if back2 is None and u - e[0] < 2.05 * lr:
                back2 = e
            self._arm_b, self._arm_se, armed = e[1], e[2], True
        if armed:                 # its deceleration per interval, from two back
            r = self._arm_b / back2[1] if back2 is not None and back2[1] < 0.0 else 1.0
            self._arm_r = min(max(r, 0.0), 1.0)

    @cython.locals(ring=list, lp=cython.double, drop_pred=cython.double)
    def _stagnant(self, step: int, l_pred: float | None) -> bool:
        ring = self._v_ring
        if self._ring_last == NO_STEP or step - self._ring_last >= self.window / 8:
            ring.append([step, self._level, l_pred])
            if len(ring) > 9:
                ring.pop(0)
            self._ring_cache()
        if l_pred is None or self._ring0_nopred or step - self._ring0_step < 0.75 * self.window:
            return False
        lp = l_pred
        drop_pred = self._ring0_pred - lp
        return drop_pred > 0 and abs(self._ring0_level - self._level) < self._c_flat * drop_pred

    def observed_sd(self) -> float:
        """The standard error of ``observed`` (the level's fall since a slowdown's onset):
        the difference of two levels, each an EWMA (half-life ``halflife`` steps, points
        ``_dt`` apart) of points scattered by ``1.2533 x _noise`` about the line. On the
        RNN-T's stall (point scatter ~5 on a loss of 19) it is 0.59: its level rose and fell
        by up to 1.4 of them while it stalled, so "it fell less than a quarter of what its
        pace promised" is judged on the fall the noise allows, not on a noisy fall of 0."""
        g = decay(self._dt, self._c_halflife)
        return 1.2533 * self._noise * sqrt(2.0 * (1.0 - g) / (1.0 + g))

    def _ring_cache(self) -> None:
        """The C copy of what `_stagnant` reads of the ring: its last step and its oldest entry."""
        ring = self._v_ring
        if not ring:
            self._ring_last = NO_STEP
            return
        old = ring[0]
        self._ring_last = ring[-1][0]
        self._ring0_step, self._ring0_level = old[0], old[1]
        self._ring0_nopred = old[2] is None
        self._ring0_pred = NAN if old[2] is None else old[2]


register(PlateauDetector)
