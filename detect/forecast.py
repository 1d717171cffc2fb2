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
from .finding import Verdict
from .forecast_config import ARGS as CONFIG_ARGS, ForecastConfig
from .forecast_fit import ForecastFit

if not cython.compiled:        # compiled: a C int, cimported in forecast.pxd
    from .forecast_fit import _SCHEDULE


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
    FEED, KIND = "level", "drift"

    def see(self, p) -> None:
        self._observe(p.step, p.loss, p.lr)

    def verdict(self) -> Verdict:
        """The loss above its forecast's band for long enough (a drift, warning)."""
        return Verdict("drift", bool(self.alert), "warning", facts={
            "l_pred": self.l_pred, "band_lo": self.band_lo, "band_hi": self.band_hi, "W": self.W})
    default_law = "power"
    lr_law = "schedule"        # what ``law="auto"`` fits when lr is sent
    ARGS = CONFIG_ARGS          # `ForecastConfig`'s fields
    CONFIG = ForecastConfig
    STATE = (
        "_lb", "_bins", "_edge", "_last", "_dt", "_s1", "_s2", "_mom", "_lr", "_warm",
        "_lrmax", "_lrlow", "_restart", "_bk", "_pend", "_mc", "_shaped", "_law", "_p",
        "_cov", "_prev", "_misfit", "_noise", "_level", "_next", "_S", "_D", "_since",
        "_alarm", "_fits", "_lo", "_hi", "_neg")

    def __init__(self, **args) -> None:
        """The arguments are `ForecastConfig`'s fields (checked there); the learned state
        starts empty (`_start`)."""
        cfg = ForecastConfig(**args)
        self.warmup, self.holdout, self.holdout_min = cfg.warmup, cfg.holdout, cfg.holdout_min
        self.fit_from, self.bin_ratio, self.refit_ratio = cfg.fit_from, cfg.bin_ratio, cfg.refit_ratio
        self.refit_min, self.threshold, self.allowance = cfg.refit_min, cfg.threshold, cfg.allowance
        self.clip, self.gate = cfg.clip, cfg.gate
        self.noise_halflife, self.d_halflife = cfg.noise_halflife, cfg.d_halflife
        self.band_z, self.bias_z, self.freeze = cfg.band_z, cfg.bias_z, cfg.freeze
        self.anneal_decay, self.law = cfg.anneal_decay, cfg.law
        self._derive(cfg)
        self._start(cfg)

    def _derive(self, cfg) -> None:
        """Typed copies for the per-update path (floats in both builds: the state's T is one)."""
        self._c_holdout, self._c_holdout_min = float(cfg.holdout), float(cfg.holdout_min)
        self._c_fit_from, self._c_bin_ratio = float(cfg.fit_from), float(cfg.bin_ratio)
        self._c_threshold, self._c_allowance = float(cfg.threshold), float(cfg.allowance)
        self._c_clip, self._c_gate = float(cfg.clip), float(cfg.gate)
        self._c_noise_hl, self._c_d_hl = float(cfg.noise_halflife), float(cfg.d_halflife)
        self._c_band_z, self._c_bias_z = float(cfg.band_z), float(cfg.bias_z)
        self._c_freeze, self._c_anneal = float(cfg.freeze), float(cfg.anneal_decay)
        self._c_d = 0.5 ** (1.0 / cfg.d_halflife)        # per-step EWMA weights (constants)
        self._c_noise = 0.5 ** (1.0 / cfg.noise_halflife)
        self._c_mpl = cfg.law in ("mpl", "auto")      # keep the mpl buckets (auto: for a restart)

    def _start(self, cfg) -> None:
        """The learned state of a detector that has seen nothing."""
        self._lb = math.log(cfg.bin_ratio)
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
        self._next = float(cfg.warmup)
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
        self._law_seen, self._law_c = None, _SCHEDULE     # `_predict`'s reading of ``_law``
        self._cov_seen = None                              # `_var`'s of ``_cov``
        self._p_seen = self._prev_seen = None              # `_law_at`'s of the parameters

    # --- update ---------------------------------------------------------------------
    def update(self, step: int, loss: float, lr: float | None = None) -> ForecastState:
        """`observe`, and the state it leaves as a `ForecastState`."""
        self.observe(step, loss, lr)
        return _new(ForecastState, (self.step, self.l_obs, self.l_pred, self.band_lo, self.band_hi,
                                    self.D, self.Q, self.T, self.W, self.S, self.alert))

    def observe(self, step: int, loss: float, lr: float | None = None) -> None:
        """One loss point. The call's values are left in the attributes named like
        `ForecastState`'s fields, with the same values (None before the first fit), so a
        caller reads them as it would the state; `update` builds the state from them. The
        typed path allocates only the floats of those a `MonitorState` holds in any case
        (``l_pred``, the band, ``D``, ``Q``, ``W``)."""
        self._observe(step, loss, lr)

    @cython.locals(st=cython.longlong, dt=cython.double, usual=cython.double,
                   x0=cython.double, x1=cython.double, x=cython.double)
    def _observe(self, step: int, loss: float, lr: float | None) -> int:
        x = loss
        self.step, self.l_obs, self.alert = step, loss, False
        if not isfinite(x):
            self.l_pred = self.band_lo = self.band_hi = self.D = self.Q = self.T = self.W = None
            self.S = self._S
            return 0
        if x < 0.0:
            self._neg = True
        st = step
        dt = self._advance(step, st, lr)
        usual = self._dt
        if dt > 0:
            self._dt += 0.05 * (dt - usual)
        if self._lr is None:
            x0, x1 = st + 1.0, 0.0
        else:
            x0, x1 = self._s1 + 1e-12, self._s2
        if self._p is None:
            self._young(step, st, x0, x1, loss, x)
        else:
            self._judge(step, st, x0, x1, x, dt, usual)

    @cython.locals(last=cython.longlong, has_last=cython.bint)
    def _advance(self, step: int, st: int, lr) -> float:
        """The step's gap since the last point (1 for the first); a step that went back
        forgets the summary past it (`_resume`); an lr moves the schedule's areas."""
        last = 0
        has_last = self._last is not None
        if has_last:
            last = self._last
            if st < last:
                self._resume(step)
        if lr is not None and self._schedule(st, lr):
            self._lr = lr
        self._last = step
        return 1.0 if not has_last else st - last

    @cython.locals(nxt=cython.double)
    def _young(self, step: int, st: int, x0: float, x1: float, loss: float, x: float) -> None:
        """Before the first fit: the point joins the summary, the fit comes at ``warmup``."""
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

    @cython.locals(pred=cython.double, vpred=cython.double, dv=cython.double,
                   sw=cython.double, mis2=cython.double, u2=cython.double, sd=cython.double,
                   r=cython.double, c=cython.double, z=cython.double, zc=cython.double,
                   S=cython.double, D=cython.double, y=cython.double, W=cython.double,
                   lo=cython.double, hi=cython.double, building=cython.bint,
                   alarm=cython.bint, rlo=cython.double, rhi=cython.double, over=cython.double)
    def _judge(self, step: int, st: int, x0: float, x1: float, x: float, dt: float,
               usual: float) -> None:
        """A point against the forecast: its standardized residual into the CUSUM ``S`` and
        the smoothed ``D``, the alarm when both are over, the point into the summary."""
        pred = self._predict(x0, x1)
        vpred, dv = self._vpred, self._dv
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
        if self._has_dv:                      # two successive fits disagree: a young curve
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
        self._learn_noise(step, building, r, c * sw, dt, usual)
        lo, hi = pred - c * sd, pred + c * sd
        y = lo if x < lo else (hi if x > hi else x)
        self._keep(st, x0, x1, x, y)
        W = S - self._c_threshold
        alarm = self._alarm = W > 0 and D > self._c_gate
        self._refit_due(step, st, building, alarm)
        self._publish(pred, sd, rlo, rhi, sw, vpred, mis2)
        self.D, self.T, self.W, self.S, self.alert = D, self.threshold, W, S, alarm

    @cython.locals(g=cython.double, ar=cython.double)
    def _learn_noise(self, step: int, building: bool, r: float, cap: float, dt: float,
                     usual: float) -> None:
        """The residuals' scale, learned while no deviation builds (a drift must not widen
        its own yardstick); a building deviation's first step is remembered (``_since``)."""
        if not building:
            self._since = None
            g = self._c_noise if dt == 1.0 else gap_decay(dt, usual, self._c_noise_hl)
            ar = r if r >= 0.0 else -r
            self._noise = g * self._noise + (1.0 - g) * (ar if ar < cap else cap)
        elif self._since is None:
            self._since = step

    def _keep(self, st: int, x0: float, x1: float, x: float, y: float) -> None:
        """The point into the range (the lowest point, the highest winsorized: a spike does
        not stretch it, and never a value no point has shown) and into the summary (``y``,
        winsorized to the clip band)."""
        if x < self._lo:
            self._lo = x
        if y < x and y > self._hi:
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

    @cython.locals(hold=cython.double, nxt=cython.double)
    def _refit_due(self, step: int, st: int, building: bool, alarm: bool) -> None:
        """Refit on the geometric schedule, never during an alarm; a building deviation
        waits its window (``holdout``), then, unconfirmed, is judged afresh."""
        nxt = self._next        # a step: compared as a C double, exactly (no int boxed)
        if st < nxt or alarm:
            pass
        elif not building:
            self._refit(step)
        else:
            hold = self._c_holdout * st
            if self._c_holdout_min > hold:
                hold = self._c_holdout_min
            if st - self._since > hold:
                self._refit(step)      # the deviation had its window and did not confirm:
                self._S = self._D = 0.0  # judge afresh against the new forecast
                self._since = None

    @cython.locals(bz=cython.double, lo=cython.double, hi=cython.double)
    def _publish(self, pred: float, sd: float, rlo: float, rhi: float, sw: float,
                 vpred: float, mis2: float) -> None:
        """The prediction, its band (within the reach, never below 0 for a loss never seen
        below 0: cross-entropy) and ``Q``."""
        bz = self._c_band_z * sd
        lo, hi = pred - bz, pred + bz
        if lo < rlo:
            lo = rlo
        if hi > rhi:
            hi = rhi
        if lo < 0.0 and not self._neg:
            lo = 0.0
        self.l_pred, self.band_lo, self.band_hi = pred, lo, hi
        self.Q = (sw * sw) / (sw * sw + vpred + mis2 + 1e-300)

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
