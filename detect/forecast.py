"""`forecast`: the W-Twin detector done right: a robust scaling-law forecast and a CUSUM.

Each update adds the loss to a bounded, log-spaced summary of the history (bins a fixed
ratio wide in step; bins older than ``fit_from`` x the current step are dropped). On a
geometric schedule (every ``refit_ratio`` x in step, at least ``refit_min`` steps apart)
the law is refitted jointly (a robust soft-L1 fit, `laws.fit`: our own bounded
Levenberg-Marquardt in numpy, checked against scipy's ``least_squares`` by
tests/test_fit_vs_scipy.py) on the bins that end before the recent ``holdout`` window, so a slow drift is not absorbed into the baseline; refits
are frozen while a deviation builds. The forecast's variance (parameter covariance) is
added to the residual noise (EWMA of absolute residuals), so far-out extrapolation widens
the band. The decision is a one-sided CUSUM of standardized residuals.

When ``lr`` is passed, the law is Tissue et al.'s ``L0 + A S1^-alpha - C S2`` over the
learning-rate area (``law="schedule"``), or Luo et al.'s multi-power law over a bounded
summary of the LR changes (``law="mpl"``, see `mpl`): warm-downs, restarts and
constant-LR phases are forecast.

This module is over the house's ~300 lines on purpose: it is one detector, and its
summary (``_add``), LR bookkeeping (``_schedule``/``_flush``), refit and per-update path
share the same learned state; split apart, each piece would reach into the others'
attributes. The law maths is in `laws`, the multi-power law's buckets in `mpl`.

>>> import random
>>> rng = random.Random(1)
>>> det = ForecastDetector()
>>> for t in range(1, 6001):
...     drift = 0.0002 * (t - 4000) if t > 4000 else 0.0
...     s = det.update(t, 3.0 + 8.0 * t ** -0.4 + rng.gauss(0, 0.03) + drift)
...     if s.alert:
...         break
>>> 4000 < s.step < 4600
True
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import laws, mpl
from .base import Detector, check, fraction, gap_decay, positive, register


class ForecastState(NamedTuple):
    step: int
    l_obs: float
    l_pred: float | None = None
    band_lo: float | None = None
    band_hi: float | None = None
    D: float | None = None
    Q: float | None = None
    T: float | None = None
    W: float | None = None
    S: float = 0.0
    alert: bool = False


# mpl: the drop's shape is fitted once the fitted bins have seen LR decreases of this x the peak
SHAPE_AFTER = 0.2


# bin layout: [index, count, sum of x0, sum of x1, sum of y, last step]
@register
class ForecastDetector(Detector):
    name = "forecast"
    default_law = "power"
    lr_law = "schedule"        # what ``law="auto"`` fits when lr is sent

    def __init__(self, *, warmup: int = 300, holdout: float = 0.1, holdout_min: int = 100,
                 fit_from: float = 0.3, bin_ratio: float = 1.02, refit_ratio: float = 1.15,
                 refit_min: int = 50, threshold: float = 15.0,
                 allowance: float = 0.75, clip: float = 4.0, gate: float = 1.0,
                 noise_halflife: float = 500.0, d_halflife: float = 50.0,
                 band_z: float = 3.0, bias_z: float = 3.0, freeze: float = 0.3, anneal_decay: float = 0.999,
                 law: str = "auto") -> None:
        for name in ("warmup", "holdout_min", "refit_min"):
            v = locals()[name]
            check(isinstance(v, int) and v >= 1, name, v, "an int >= 1 (steps)")
        for name in ("threshold", "allowance", "clip", "gate", "noise_halflife", "d_halflife",
                     "band_z", "bias_z"):
            positive(name, locals()[name])
        fraction("holdout", holdout, 0.0, 0.9)
        fraction("fit_from", fit_from, 0.0, 0.9)
        fraction("freeze", freeze, 0.0, 1.0 + 1e-9)
        fraction("anneal_decay", anneal_decay)
        check(isinstance(bin_ratio, float) and 1.0 < bin_ratio <= 2.0, "bin_ratio", bin_ratio,
              "a float in (1, 2]")
        check(isinstance(refit_ratio, float) and 1.0 < refit_ratio <= 4.0, "refit_ratio",
              refit_ratio, "a float in (1, 4]")
        check(law in ("auto", "power", "exp", "schedule", "mpl"), "law", law,
              "one of 'auto', 'power', 'exp', 'schedule', 'mpl'")
        self.warmup, self.holdout, self.holdout_min = warmup, holdout, holdout_min
        self.fit_from, self.bin_ratio, self.refit_ratio = fit_from, bin_ratio, refit_ratio
        self.refit_min, self.threshold, self.allowance = refit_min, threshold, allowance
        self.clip, self.gate, self.noise_halflife, self.d_halflife = clip, gate, noise_halflife, d_halflife
        self.band_z, self.bias_z, self.freeze = band_z, bias_z, freeze
        self.anneal_decay, self.law = anneal_decay, law
        self._c_d = 0.5 ** (1.0 / d_halflife)        # per-step EWMA weights (constants)
        self._c_noise = 0.5 ** (1.0 / noise_halflife)
        self._c_mpl = law in ("mpl", "auto")      # keep the mpl buckets (auto: for a restart)
        self._lb = math.log(bin_ratio)
        self._bins: list[list[float]] = []
        self._edge = 0.0           # step + 1 at which the current bin ends
        self._last = None          # last step seen
        self._dt = 1.0             # EWMA of the gap between points (steps)
        self._s1 = 0.0             # summed learning rate
        self._s2 = 0.0             # annealing area
        self._mom = 0.0            # annealing momentum
        self._lr = None            # last learning rate
        self._warm = True          # in the first rising LR phase (warm-up): no mpl buckets
        self._lrmax = 0.0          # largest learning rate seen
        self._lrlow = math.inf     # lowest learning rate since the warm-up
        self._restart = False      # a warm restart seen: law="auto" fits mpl from then on
        self._bk: list[list[float]] = []   # mpl: buckets of LR changes (see `mpl`)
        self._pend = None          # mpl: pending small changes [sum, sum |.|, |.|-weighted
        #                            sums of lr and of s, first lr, first s, count]
        self._mc = None            # mpl: per-step prediction cache (see `mpl.anchor`)
        self._shaped = False       # mpl: the drop's shape (C, beta, gamma) fitted once
        self._law = None           # law of the current fit
        self._p = None             # fitted parameters
        self._cov = None           # their covariance
        self._prev = None          # the previous fit's parameters (fit-to-fit disagreement)
        self._misfit = 0.0
        self._noise = 0.0          # EWMA of |residual| (per point, loss units)
        self._level = None         # EWMA of the loss before the first fit
        self._next = float(warmup)
        self._S = 0.0
        self._D = 0.0
        self._since = None         # step at which the current deviation started building
        self._alarm = False
        self._fits = 0

    # --- summary -------------------------------------------------------------------
    def _add(self, step: int, x: tuple, y: float) -> None:
        b = self._bins[-1] if self._bins else None
        if b is not None and step + 1.0 < self._edge:
            k = b[0]
        else:
            k = int(math.log(step + 1.0) / self._lb)
            self._edge = self.bin_ratio ** (k + 1)
        if b is None or b[0] != k:
            self._bins.append([k, 1, x[0], x[1], y, step])
            lo = self.fit_from * step
            while len(self._bins) > 1 and self._bins[0][5] < lo:
                self._bins.pop(0)
        else:
            b[1] += 1
            b[2] += x[0]
            b[3] += x[1]
            b[4] += y
            b[5] = step

    def _schedule(self, step: int, lr: float | None) -> None:
        if lr is None or not math.isfinite(lr):
            return
        dt = 1.0 if self._last is None else max(step - self._last, 0)
        prev = lr if self._lr is None else self._lr
        self._mom = self._mom * self.anneal_decay ** dt + (prev - lr)
        s = self._s1
        self._s1 += lr * dt
        self._s2 += self._mom * dt
        if self._lr is None and self._bins:
            self._bins, self._edge = [], 0.0   # the law changes with lr: start the summary again
            self._p = None
        if lr > self._lrmax:
            self._lrmax = lr
        if not self._warm:
            if lr < self._lrlow:
                self._lrlow = lr
            elif not self._restart and lr > 2.0 * self._lrlow and lr > 0.1 * self._lrmax:
                self._restart = True           # the LR came back up after decaying
                if self.law == "auto":
                    self._next = min(self._next, step)   # refit now, with mpl
        if lr != prev and self._c_mpl and not (self._warm and lr > prev):
            # after warm-up (whose area stays in S1): small changes of one sign gather in
            # a pending group (a few sums, no log) that joins the buckets every PEND_MAX
            # changes, when the LR leaves PEND_TOL of the group's first LR, or on a big change
            self._warm = False
            delta = prev - lr
            w = delta if delta > 0.0 else -delta
            g = self._pend
            if g is not None and (g[0] > 0.0) == (delta > 0.0) and g[6] < mpl.PEND_MAX \
                    and -mpl.PEND_TOL * g[4] <= lr - g[4] <= mpl.PEND_TOL * g[4]:
                g[0] += delta
                g[1] += w
                g[2] += w * lr
                g[3] += w * s
                g[6] += 1
            else:
                if g is not None:
                    self._flush()
                self._pend = [delta, w, w * lr, w * s, lr, s, 1]
                if w > mpl.PEND_TOL * lr:
                    self._flush()
        self._lr = lr

    def _flush(self) -> None:
        """The pending LR changes into the mpl buckets (and the live cache), as one."""
        d, w, wlr, ws = self._pend[:4]
        self._pend = None
        le = math.log(max(wlr / w, 1e-8 * self._lrmax, 1e-300))
        s = ws / w
        ref = self._bins[0][2] / self._bins[0][1] if self._bins else s
        mpl.add(self._bk, d, le, s, ref)
        if self._mc is not None:
            mpl.note(self._mc, self._p, d, le, s)

    # --- fit ------------------------------------------------------------------------
    def _refit(self, step: int) -> None:
        if self._pend is not None:
            self._flush()
        self._next = max(step * self.refit_ratio, step + self.refit_min)
        upto = step - max(self.holdout * step, self.holdout_min)
        law = self.law if self.law != "auto" else (
            self.default_law if self._lr is None else "mpl" if self._restart else self.lr_law)
        aux = mpl.arrays(self._bk) if law == "mpl" else None
        a = np.array(self._bins, dtype=float)
        fit_rows = a[:, 5] <= upto
        if int(fit_rows.sum()) < laws.NPARAMS[law] + 3:
            return
        n = a[:, 1]
        X = a[:, 2:4] / n[:, None]
        y = a[:, 4] / n
        if law == "exp":
            X = X - np.array([1.0, 0.0])
        f = fit_rows
        scale = self._noise * 1.2533 if self._p is not None else float(
            np.median(np.abs(np.diff(y[f]))) + 1e-9) * math.sqrt(float(np.median(n[f])))
        freeze = ()
        if law == "mpl" and self._bk:
            # the drop's shape (C, beta, gamma) is fitted once the fitted bins have seen a
            # decrease of SHAPE_AFTER x the peak LR; before, only its size B
            s_seen = float(X[f][-3, 0])
            seen = sum(b[1] for b in self._bk if b[3] / b[1] < s_seen)
            if seen < SHAPE_AFTER * self._lrmax:
                freeze = (4, 5, 6)
        warm = self._p if law == self._law else None
        if law == "mpl" and self._bk and not freeze and not self._shaped:
            warm = None                        # the first fit of the drop's shape: cold
        out = laws.fit(law, X[f], y[f], n[f], scale, warm, aux, freeze, self._lrmax or None)
        if out is None:
            return
        p, cov, misfit, resid_sd = out
        if self._law is None:
            self._noise = resid_sd / 1.2533
            scale = resid_sd
        if self._p is not None and law == self._law:
            self._prev = self._p
        elif law != self._law:
            self._prev = None                  # another law's parameters: no fit-to-fit term
        self._p, self._cov, self._misfit = p, cov, misfit
        self._law = law
        self._mc = None
        self._shaped = self._shaped or (law == "mpl" and bool(self._bk) and not freeze)
        self._fits += 1

    # --- update ---------------------------------------------------------------------
    def update(self, step: int, loss: float, lr: float | None = None) -> ForecastState:
        if not math.isfinite(loss):
            return ForecastState(step, loss, None, None, None, None, None, None, None, self._S)
        last = self._last
        if last is not None and step < last:
            self._resume(step)
        if lr is not None:
            self._schedule(step, lr)
        dt = 1.0 if last is None else step - last
        self._last = step
        usual = self._dt
        if dt > 0:
            self._dt += 0.05 * (dt - usual)
        x = (step + 1.0, 0.0) if self._lr is None else (self._s1 + 1e-12, self._s2)
        p = self._p
        if p is None:
            self._level = loss if self._level is None else self._level + 0.1 * (loss - self._level)
            self._add(step, x, loss)
            if step >= self._next:
                self._refit(step)
            return ForecastState(step, loss)
        law = self._law
        if law == "mpl":
            pred, vpred, dv = self._mpl_predict(x[0])
        else:
            xl = (x[0] - 1.0, x[1]) if law == "exp" else x
            pred, vpred = laws.predict(law, xl, p, self._cov)
            dv = None if self._prev is None else laws.value(law, xl, self._prev) - pred
        sw = 1.2533 * self._noise + 1e-12
        mis2 = self._misfit * self._misfit
        u2 = vpred + mis2                     # forecast uncertainty: a bias shared by all steps
        if dv is not None:                    # two successive fits disagree: a young curve
            u2 += dv * dv
        sd = math.sqrt(sw * sw + u2)
        r = loss - pred
        c = self.clip
        z = (r - self.bias_z * math.sqrt(u2)) / sw
        zc = c if z > c else (-c if z < -c else z)
        S = self._S + zc - self.allowance
        S = self._S = S if S > 0.0 else 0.0
        D = self._D = self._D + (1.0 - (self._c_d if dt == 1.0 else gap_decay(dt, usual, self.d_halflife))) * (zc - self._D)
        building = S > self.freeze * self.threshold
        if not building:
            self._since = None
            g = self._c_noise if dt == 1.0 else gap_decay(dt, usual, self.noise_halflife)
            ar = r if r >= 0.0 else -r
            self._noise = g * self._noise + (1.0 - g) * (ar if ar < c * sw else c * sw)
        elif self._since is None:
            self._since = step
        y = pred - c * sd if loss < pred - c * sd else (pred + c * sd if loss > pred + c * sd else loss)
        if step + 1.0 < self._edge:           # the common case: the point joins the open bin
            b = self._bins[-1]
            b[1] += 1
            b[2] += x[0]
            b[3] += x[1]
            b[4] += y
            b[5] = step
        else:
            self._add(step, x, y)
        W = S - self.threshold
        alarm = self._alarm = W > 0 and D > self.gate
        if step >= self._next and not alarm:
            if not building:
                self._refit(step)
            elif step - self._since > max(self.holdout * step, self.holdout_min):
                self._refit(step)      # the deviation had its window and did not confirm:
                self._S = self._D = 0.0  # judge afresh against the new forecast
                self._since = None
        bz = self.band_z * sd
        return ForecastState(step, loss, pred, pred - bz, pred + bz, D,
                             (sw * sw) / (sw * sw + vpred + mis2 + 1e-300), self.threshold, W, S, alarm)

    def _mpl_predict(self, s1: float) -> tuple[float, float, float | None]:
        """Multi-power-law forecast, its variance and the previous fit's disagreement at
        ``S1 = s1``, from the cache (refreshed when S1 moved past its reach)."""
        c, p = self._mc, self._p
        if c is None or s1 - c[mpl.S_A] > c[mpl.DMAX]:
            c = self._mc = mpl.anchor(self._bk, p, self._cov, self._prev, s1,
                                      mpl.TOL_NOISE * 1.2533 * self._noise)
        ld = mpl.drop(c, p, s1)
        ls1 = math.log(s1)
        e = math.exp(p[1] - p[2] * ls1)
        g2 = -e * ls1
        var = (laws._quad(1.0, e, g2, 0.0, self._cov)
               + 2.0 * (c[mpl.V0] + e * c[mpl.V1] + g2 * c[mpl.V2]) + c[mpl.CLL])
        pred = p[0] + e - ld
        q = self._prev
        dv = None if q is None else q[0] + math.exp(q[1] - q[2] * ls1) - e - p[0] - c[mpl.DPREV]
        return pred, (var if var > 0.0 else 0.0), dv

    def _resume(self, step: int) -> None:
        """Steps went back: forget the summary past ``step`` and the building evidence."""
        self._bins = [b for b in self._bins if b[5] <= step]
        self._edge = 0.0
        self._S = 0.0
        self._D = 0.0
        self._since = None
        self._alarm = False
        self._next = min(self._next, step + self.refit_min)
        self._mc = None


@register
class FinetuningDetector(ForecastDetector):
    """`forecast` with the exponential-to-floor law: fine-tuning curves saturate fast."""

    name = "finetuning"
    default_law = "exp"
