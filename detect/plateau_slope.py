"""`PlateauSlope`: the learned state of the `plateau` detector and the slope it reads.

The base class of `plateau.PlateauDetector` (which adds the arguments and the rules of
`observe`). Here: the slowdown rule's weighted least-squares line of loss on ``ln step``
(eight running sums re-centred on the current ``ln step``: `_reset_slope`, `_slowdown`),
its reference slope and onset (`_arm`, `_shortfall`, `observed_sd`), the ring of slopes
every 0.05 in ``ln step`` and the stagnation check on it (`_stagnant`, `_ring_cache`),
and the properties that give a snapshot the state's lists over the C fields (declared in
``plateau_slope.pxd``).
"""

from __future__ import annotations

import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

if not cython.compiled:       # compiled: libc's and base's C values, cimported in plateau_slope.pxd
    from math import log, sqrt

    from .base import _GAP

from . import base
from .base import Detector, decay

_GRID = cython.declare(cython.double, 0.05)     # ln-step spacing of the slope ring
INF = cython.declare(cython.double, math.inf)
NAN = cython.declare(cython.double, base.NAN)              # a float state with no value yet
NO_STEP = cython.declare(cython.longlong, base.NO_STEP)    # a step state with no step yet


@cython.cclass
class PlateauSlope(Detector):
    """The plateau detector's state and slope machinery (`plateau.PlateauDetector`)."""

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
