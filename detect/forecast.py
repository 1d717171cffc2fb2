"""`forecast`: the W-Twin detector done right: a robust scaling-law forecast and a CUSUM.

Each update adds the loss to a bounded, log-spaced summary of the history (bins a fixed
ratio wide in step; bins older than ``fit_from`` x the current step are dropped). On a
geometric schedule (every ``refit_ratio`` x in step, at least ``refit_min`` steps apart)
the law is refitted jointly (a robust soft-L1 fit, `lawfit.fit`: our own bounded
Levenberg-Marquardt in numpy, checked against scipy's ``least_squares`` by
tests/test_fit_vs_scipy.py) on the bins that end before the recent ``holdout`` window, so a slow drift is not absorbed into the baseline; refits
are frozen while a deviation builds. The forecast's variance (parameter covariance) is
added to the residual noise (EWMA of absolute residuals), so far-out extrapolation widens
the band. The decision is a one-sided CUSUM of standardized residuals.

The fit runs in the run's units (`lawfit.fit`'s ``ref``: the loss less the lowest loss
seen, over the range seen, ``_lo``/``_hi``), so a loss logged x100 or +1000 gets the
same forecast up to the transform; the forecast and its band are held within ``REACH`` x
that range of it, the distance cut off joining the forecast's variance, and the band's
lower edge stays >= 0 while no loss has been negative (docs/DETECTION.md).

When ``lr`` is passed, the law is Tissue et al.'s ``L0 + A S1^-alpha - C S2`` over the
learning-rate area (``law="schedule"``), or Luo et al.'s multi-power law over a bounded
summary of the LR changes (``law="mpl"``, see `mpl`): warm-downs, restarts and
constant-LR phases are forecast.

One source, two builds (docs/COMPILED.md): a ``cython.cclass`` declared in ``forecast.pxd``,
in Cython's pure-Python mode. The per-update path (`observe`) is typed scalar code; it
allocates only the floats it leaves in the attributes named like `ForecastState`'s
fields that a `MonitorState` holds in any case (``S`` is a C double).

The class is in two modules by job: `forecast_fit.ForecastFit`, its base, holds the
learned state (its C fields are declared in ``forecast_fit.pxd``) and what fits it: the
summary (``_add``), the LR bookkeeping (``_schedule``/``_flush``), the refit and the
fitted law's typed value (``_law_at``/``_mpl_at``); this module has the arguments, the
per-update path and the snapshot's restore. The law maths is in `laws` (its fit in
`lawfit`), the multi-power law's buckets in `mpl`.

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

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (forecast.pxd)
    from math import isfinite, sqrt

from .base import Detector, check, fraction, gap_decay, positive, register
from .forecast_fit import ForecastFit


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


_new = tuple.__new__     # a NamedTuple from its fields, without its Python-level __new__
# the forecast and its band stay within REACH x the loss's range of what the run has shown
REACH = 0.5
_REACH = cython.declare(cython.double, REACH)


@cython.cclass
class ForecastDetector(ForecastFit):
    name = "forecast"
    default_law = "power"
    lr_law = "schedule"        # what ``law="auto"`` fits when lr is sent
    ARGS = ("warmup", "holdout", "holdout_min", "fit_from", "bin_ratio", "refit_ratio",
            "refit_min", "threshold", "allowance", "clip", "gate", "noise_halflife",
            "d_halflife", "band_z", "bias_z", "freeze", "anneal_decay", "law")
    STATE = (
        "_lb", "_bins", "_edge", "_last", "_dt", "_s1", "_s2", "_mom", "_lr", "_warm",
        "_lrmax", "_lrlow", "_restart", "_bk", "_pend", "_mc", "_shaped", "_law", "_p",
        "_cov", "_prev", "_misfit", "_noise", "_level", "_next", "_S", "_D", "_since",
        "_alarm", "_fits", "_lo", "_hi", "_neg")

    def __init__(self, *, warmup: int = 300, holdout: float = 0.1, holdout_min: int = 100,
                 fit_from: float = 0.3, bin_ratio: float = 1.02, refit_ratio: float = 1.15,
                 refit_min: int = 50, threshold: float = 15.0,
                 allowance: float = 0.75, clip: float = 4.0, gate: float = 1.0,
                 noise_halflife: float = 500.0, d_halflife: float = 50.0,
                 band_z: float = 3.0, bias_z: float = 3.0, freeze: float = 0.3, anneal_decay: float = 0.999,
                 law: str = "auto") -> None:
        for name, v in (("warmup", warmup), ("holdout_min", holdout_min), ("refit_min", refit_min)):
            check(isinstance(v, int) and v >= 1, name, v, "an int >= 1 (steps)")
        for name, v in (("threshold", threshold), ("allowance", allowance), ("clip", clip),
                        ("gate", gate), ("noise_halflife", noise_halflife),
                        ("d_halflife", d_halflife), ("band_z", band_z), ("bias_z", bias_z)):
            positive(name, v)
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
        # typed copies for the per-update path (floats in both builds: the state's T is one)
        self._c_holdout, self._c_holdout_min = float(holdout), float(holdout_min)
        self._c_fit_from, self._c_bin_ratio = float(fit_from), float(bin_ratio)
        self._c_threshold, self._c_allowance = float(threshold), float(allowance)
        self._c_clip, self._c_gate = float(clip), float(gate)
        self._c_noise_hl, self._c_d_hl = float(noise_halflife), float(d_halflife)
        self._c_band_z, self._c_bias_z = float(band_z), float(bias_z)
        self._c_freeze, self._c_anneal = float(freeze), float(anneal_decay)
        self._c_d = 0.5 ** (1.0 / d_halflife)        # per-step EWMA weights (constants)
        self._c_noise = 0.5 ** (1.0 / noise_halflife)
        self._c_mpl = law in ("mpl", "auto")      # keep the mpl buckets (auto: for a restart)
        self._lb = math.log(bin_ratio)
        self._closed = []
        self._has_open = False
        self._ok = self._on = self._ostep = 0
        self._ox0 = self._ox1 = self._oy = 0.0
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
        self._bk = []              # mpl: buckets of LR changes (see `mpl`)
        self._pn = 0               # mpl: pending small changes (see `_pend`)
        self._pd = self._pw = self._pwl = self._pws = self._pl0 = self._ps0 = 0.0
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
        self._lo = math.inf        # lowest loss seen, and highest (winsorized once fitted):
        self._hi = -math.inf       # the fit's units and the forecast's reach
        self._neg = False          # a negative loss seen (else the band stays >= 0)
        self.step = self.l_obs = self.l_pred = self.band_lo = self.band_hi = None
        self.D = self.Q = self.T = self.W = None
        self.S, self.alert = 0.0, False
        self._vpred = self._dv = 0.0
        self._has_dv = False

    # --- update ---------------------------------------------------------------------
    def update(self, step: int, loss: float, lr: float | None = None) -> ForecastState:
        """`observe`, and the state it leaves as a `ForecastState`."""
        self.observe(step, loss, lr)
        return _new(ForecastState, (self.step, self.l_obs, self.l_pred, self.band_lo, self.band_hi,
                                    self.D, self.Q, self.T, self.W, self.S, self.alert))

    @cython.locals(st=cython.longlong, last=cython.longlong, dt=cython.double,
                   usual=cython.double, x0=cython.double, x1=cython.double,
                   pred=cython.double, vpred=cython.double, dv=cython.double,
                   sw=cython.double, mis2=cython.double, u2=cython.double, sd=cython.double,
                   r=cython.double, c=cython.double, z=cython.double, zc=cython.double,
                   S=cython.double, D=cython.double, g=cython.double, ar=cython.double,
                   y=cython.double, W=cython.double, bz=cython.double, lo=cython.double,
                   hi=cython.double, hold=cython.double, building=cython.bint,
                   alarm=cython.bint, has_dv=cython.bint, nxt=cython.double,
                   has_last=cython.bint, x=cython.double, rlo=cython.double,
                   rhi=cython.double, over=cython.double)
    def observe(self, step: int, loss: float, lr: float | None = None) -> None:
        """One loss point. The call's values are left in the attributes named like
        `ForecastState`'s fields, with the same values (None before the first fit), so a
        caller reads them as it would the state; `update` builds the state from them. The
        typed path allocates only the floats of those a `MonitorState` holds in any case
        (``l_pred``, the band, ``D``, ``Q``, ``W``)."""
        x = loss
        self.step, self.l_obs, self.alert = step, loss, False
        if not isfinite(x):
            self.l_pred = self.band_lo = self.band_hi = self.D = self.Q = self.T = self.W = None
            self.S = self._S
            return
        if x < 0.0:
            self._neg = True
        st, last = step, 0
        has_last = self._last is not None
        if has_last:
            last = self._last
            if st < last:
                self._resume(step)
        if lr is not None and self._schedule(st, lr):
            self._lr = lr
        dt = 1.0 if not has_last else st - last
        self._last = step
        usual = self._dt
        if dt > 0:
            self._dt += 0.05 * (dt - usual)
        if self._lr is None:
            x0, x1 = st + 1.0, 0.0
        else:
            x0, x1 = self._s1 + 1e-12, self._s2
        if self._p is None:
            self._level = loss if self._level is None else self._level + 0.1 * (loss - self._level)
            if x < self._lo:
                self._lo = x
            if x > self._hi:
                self._hi = x
            self._add(st, x0, x1, x)
            nxt = self._next
            if st >= nxt:
                self._refit(step)
            self.l_pred = self.band_lo = self.band_hi = self.D = self.Q = self.T = self.W = None
            self.S = 0.0
            return
        if self._law == "mpl":
            pred = self._mpl_at(x0)
        else:
            pred = self._law_at(x0, x1)
        vpred, dv, has_dv = self._vpred, self._dv, self._has_dv
        # never beyond REACH x the range of what the run has shown: a law extrapolated
        # past it is that far from anything known, so the distance joins its uncertainty
        rlo, rhi = self._lo, self._hi
        over = _REACH * (rhi - rlo)
        rlo, rhi = rlo - over, rhi + over
        over = 0.0
        if pred < rlo:
            over, pred = rlo - pred, rlo
        elif pred > rhi:
            over, pred = pred - rhi, rhi
        vpred += over * over
        sw = 1.2533 * self._noise + 1e-12
        mis2 = self._misfit * self._misfit
        u2 = vpred + mis2                     # forecast uncertainty: a bias shared by all steps
        if has_dv:                            # two successive fits disagree: a young curve
            u2 += dv * dv
        sd = sqrt(sw * sw + u2)
        r = x - pred
        c = self._c_clip
        z = (r - self._c_bias_z * sqrt(u2)) / sw
        zc = c if z > c else (-c if z < -c else z)
        S = self._S + zc - self._c_allowance
        S = self._S = S if S > 0.0 else 0.0
        D = self._D = self._D + (1.0 - (self._c_d if dt == 1.0 else gap_decay(dt, usual, self._c_d_hl))) * (zc - self._D)
        building = S > self._c_freeze * self._c_threshold
        if not building:
            self._since = None
            g = self._c_noise if dt == 1.0 else gap_decay(dt, usual, self._c_noise_hl)
            ar = r if r >= 0.0 else -r
            self._noise = g * self._noise + (1.0 - g) * (ar if ar < c * sw else c * sw)
        elif self._since is None:
            self._since = step
        lo, hi = pred - c * sd, pred + c * sd
        y = lo if x < lo else (hi if x > hi else x)
        if x < self._lo:                      # the range: the lowest point, and the highest
            self._lo = x                      # winsorized (a spike does not stretch it);
        if y < x and y > self._hi:            # never a value no point has shown
            self._hi = y
        elif x > self._hi and x <= y:
            self._hi = x
        if st + 1.0 < self._edge:             # the common case: the point joins the open bin
            self._on += 1
            self._ox0 += x0
            self._ox1 += x1
            self._oy += y
            self._ostep = st
        else:
            self._add(st, x0, x1, y)
        W = S - self._c_threshold
        alarm = self._alarm = W > 0 and D > self._c_gate
        nxt = self._next
        if st >= nxt and not alarm:
            if not building:
                self._refit(step)
            else:
                hold = self._c_holdout * st
                if self._c_holdout_min > hold:
                    hold = self._c_holdout_min
                if st - self._since > hold:
                    self._refit(step)      # the deviation had its window and did not confirm:
                    self._S = self._D = 0.0  # judge afresh against the new forecast
                    self._since = None
        bz = self._c_band_z * sd
        lo, hi = pred - bz, pred + bz
        if lo < rlo:
            lo = rlo
        if hi > rhi:
            hi = rhi
        if lo < 0.0 and not self._neg:         # a loss never seen below 0 (cross-entropy)
            lo = 0.0
        self.l_pred, self.band_lo, self.band_hi = pred, lo, hi
        self.D, self.Q = D, (sw * sw) / (sw * sw + vpred + mis2 + 1e-300)
        self.T, self.W, self.S, self.alert = self.threshold, W, S, alarm

    def restore(self, snap: dict) -> None:
        """`Detector.restore`; a snapshot from before ``_lo``/``_hi`` takes them from its bins."""
        Detector.restore(self, snap)
        if "_lo" not in snap and self._has_open:
            means = [b[4] / b[1] for b in self._bins]
            self._lo, self._hi = min(means), max(means)
            self._neg = self._lo < 0.0

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


@cython.cclass
class FinetuningDetector(ForecastDetector):
    """`forecast` with the exponential-to-floor law: fine-tuning curves saturate fast."""

    name = "finetuning"
    default_law = "exp"


register(ForecastDetector)
register(FinetuningDetector)
