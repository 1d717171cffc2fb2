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

from .base import GAP, Detector, check, decay, fraction, positive, register

_GRID = 0.05     # ln-step spacing of the slope ring


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


@register
class PlateauDetector(Detector):
    name = "plateau"

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
        self._lnoise = 0.0     # EWMA of |change of the level| between points
        self._same = 0         # points in a row equal to the one before, to the last digit
        self._prev = None
        self._c_lr = math.log(slow_ratio)
        self._c_level = 0.5 ** (1.0 / halflife)     # per-step EWMA weight (a constant)
        self._level = None
        self._last_n = -math.inf   # step of the last point in the level's noise
        self._dprev = None         # the level's last change
        self._first = None
        self._last = None
        self._ref = -math.inf
        self._best = math.inf
        self._n = 0
        self._ring = []        # [step, level, l_pred] every window/8 steps, 9 at most
        self._dt = 1.0         # EWMA of the gap between points in the line (steps)
        self._reset_slope()

    def _reset_slope(self) -> None:
        self._sums = [0.0] * 8   # W, Wu, Wuu, Wy, Wuy (weights w), V, Vu, Vuu (weights w^2)
        self._u = None           # ln(step + 1) the sums are centred on
        self._t = 0.0            # step + 1 of that point
        self._noise = 0.0        # EWMA of |residual| from the line
        self._slopes = []        # [ln step, slope, se] every _GRID, slow_span intervals back
        self._armed = None       # [slope, se] of the reference, when armed
        self._slow = False
        self._onset = None       # [ln step, level, reference slope] where a slowdown began
        self._hole = None        # [ln step before, ln step after] a gap: slopes straddling
        #                          it are not kept, nor is a reference taken from inside it

    def update(self, step: int, loss: float, l_pred: float | None = None,
               deviating: bool = False) -> PlateauState:
        if not math.isfinite(loss):
            return PlateauState(step, False, None, 0.0, self._level or 0.0)
        self._n += 1
        if self._level is None:
            self._level, self._first, self._last = loss, step, step
        if step < self._last:
            self._reset_slope()
        if step > self._last:
            self._same = self._same + 1 if loss == self._prev else 0
            self._prev = loss
        z = self._slowdown(step, loss) if self.slowdown and step + 1.0 > self._t else -math.inf
        dt = step - self._last
        g = self._c_level if dt == 1 else decay(dt, self.halflife)
        self._last = step
        prev = self._level
        level = self._level = g * self._level + (1 - g) * loss
        if step > self._last_n:       # second differences: a trend is not scatter
            if self._dprev is not None:
                a = 1.0 / self._n if self._n < 20 else 0.05
                self._lnoise += a * (abs((level - prev) - self._dprev) * 0.7071 - self._lnoise)
            self._dprev = level - prev
            self._last_n = step
        age = step - self._first
        if age <= 0.1 * self.grace and level > self._ref:
            self._ref = level
        if level < self._best:
            self._best = level
        ref = self._ref
        progress = (ref - self._best) / (abs(ref) if abs(ref) > 1e-12 else 1e-12)
        if self._same + 1 >= self.frozen_points:
            return PlateauState(step, True, "frozen", progress, loss, z, repeats=self._same + 1)
        if age >= self.grace and self._n >= self.min_points and progress < self.min_progress:
            sd = 0.8862 * self._lnoise        # no scatter at all: the fraction decides
            pz = (ref - self._best) / sd if sd > 0.0 else 0.0
            if pz < self.min_progress_z:
                return PlateauState(step, True, "no_learning", progress, level, z, progress_z=pz)
        short = self._shortfall(step, level) if self._onset is not None else 0.0
        slow = z > self.slow_z or (self._slow and (z > 0.0 or short > 0.0))
        if slow and not self._slow and self._armed is not None:
            self._onset = [math.log(step + 1.0), level, self._armed[0], self._armed[2]]
        self._slow = slow
        if not slow and self._onset is not None:
            self._onset = None
        if self._slow:
            return PlateauState(step, True, "slowdown", progress, level, z, short)
        if self._stagnant(step, l_pred) and deviating:
            return PlateauState(step, True, "stagnation", progress, level, z)
        return PlateauState(step, False, None, progress, level, z)

    def _slowdown(self, step: int, loss: float) -> float:
        t = step + 1.0
        u = math.log(t)
        W, Wu, Wuu, Wy, Wuy, V, Vu, Vuu = self._sums
        g = 1.0
        if self._u is not None:   # re-centre on u (older points get u' = u_old - u), then decay
            gap = t - self._t
            if gap > GAP * self._dt:   # a pause or a resume's rewind: the slopes straddle it
                # until the points before it weigh a quarter (two half-lives of the weights)
                self._hole = [self._u, math.log(t * (1.0 + 2.0 * self.slow_halflife))]
            self._dt += 0.05 * (gap - self._dt)
            d = u - self._u
            g = 0.5 ** ((t - self._t) / (self.slow_halflife * t))
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
            if s > 0.0 and r > self.clip * s:
                r = self.clip * s
                loss = fit + r
            self._noise = g * self._noise + (1 - g) * abs(r) if self._noise > 0 else abs(r)
        self._sums = [W + 1.0, Wu, Wuu, Wy + loss, Wuy, V + 1.0, Vu, Vuu]
        W, Wy = W + 1.0, Wy + loss
        V += 1.0
        hole = self._hole
        if step < self.slow_warmup or W < self.slow_points or self._noise <= 0.0 or (
                hole is not None and u < hole[1]):
            return -math.inf
        sxx = Wuu - Wu * Wu / W
        if sxx <= 0.0:
            return -math.inf
        b = (Wuy - Wu * Wy / W) / sxx
        mu = Wu / W
        s = 1.2533 * self._noise
        se = s * math.sqrt(max(Vuu - 2 * mu * Vu + mu * mu * V, 0.0)) / sxx
        ring = self._slopes
        if not ring or u - ring[-1][0] >= _GRID:
            ring.append([u, b, se])
            self._arm(u)
        ref = self._armed
        k = self.slow_keep
        if ref is None or -(ref[0] + self.accel_z * ref[1]) * self._c_lr < self.slow_effect * s:
            return -math.inf      # no reference, or the decline it withholds is not surely material
        return (b - k * ref[0]) / math.sqrt(se * se + k * k * ref[1] * ref[1])

    def _shortfall(self, step: int, level: float) -> float:
        """Loss units the level stands above where the reference pace would have taken it
        from the slowdown's onset, decelerating as it did before (by ``r`` per interval,
        measured between the reference and the slope one interval before it): the size
        of a stagnation. A curve that was already flattening fast withholds little."""
        if self._onset is None:
            return 0.0
        u0, level0, slope, r = self._onset
        slope *= r                # the reference is one interval back: its pace at the onset
        x = math.log(step + 1.0) - u0
        lr = self._c_lr
        pace = x if r >= 0.999 else (lr / math.log(max(r, 1e-6))) * (r ** (x / lr) - 1.0)
        return level - (level0 + slope * pace)

    def _arm(self, u: float) -> None:
        """Reference slope ``slow_ratio`` x back, if no steepening in the span before it."""
        lr = self._c_lr
        ring, span = self._slopes, lr * self.slow_span
        while len(ring) > 2 and u - ring[1][0] >= span:
            ring.pop(0)
        self._armed = None
        if u - ring[0][0] < 0.98 * span:
            return
        hole = self._hole
        if hole is not None and hole[0] < u - lr < hole[1]:
            return                # the reference would be a slope from before a gap
        flat = None               # the least steep slope so far, oldest first
        back2 = None              # the slope about two intervals back
        for e in ring:
            if u - e[0] < lr:
                break
            if flat is not None and (flat[1] - e[1]) > self.accel_z * math.hypot(flat[2], e[2]):
                self._armed = None
                return            # the slope steepened: not a decelerating regime
            if flat is None or e[1] > flat[1]:
                flat = e
            if back2 is None and u - e[0] < 2.05 * lr:
                back2 = e
            self._armed = [e[1], e[2]]
        if self._armed is not None:   # its deceleration per interval, from two back
            r = self._armed[0] / back2[1] if back2 is not None and back2[1] < 0.0 else 1.0
            self._armed.append(min(max(r, 0.0), 1.0))

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
