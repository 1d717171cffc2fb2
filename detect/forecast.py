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
fields that a `MonitorState` holds in any case (``S`` is a C double). The open bin and the pending LR changes
live in typed fields (the
``_bins`` and ``_pend`` of a snapshot are properties over them), the fitted parameters
are read from their lists, and the law's value, its variance and the multi-power
cache's Taylor step are written out here (`_law_at`, `_mpl_at`) as typed copies of
`laws.predict`/`laws.value` and `mpl.drop` (tests/test_laws.py holds them equal). The
refit, the buckets and the cache refresh stay Python-object code (numpy), amortized.
The math functions are C's in the compiled build, guarded (`_exp`, `_log`) so that a
value outside their domain raises as Python's ``math`` does.

This module is over the house's ~300 lines on purpose: it is one detector, and its
summary (``_add``), LR bookkeeping (``_schedule``/``_flush``), refit and per-update path
share the same learned state; split apart, each piece would reach into the others'
attributes (a compiled class's C fields are visible to its own module and to those that
cimport its ``.pxd``). The typed per-update law (~100 lines) is here for the same
reason: it reads the fit's fields and writes the variance beside them without a Python
call. The law maths is in `laws` (its fit in `lawfit`), the multi-power law's buckets
in `mpl`.

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

try:
    import cython
except ImportError:            # no Cython: the pure build runs (detect/_cython_shim.py)
    from . import _cython_shim as cython
if not cython.compiled:        # compiled: libc's (forecast.pxd)
    from math import exp, isfinite, log, sqrt

from . import lawfit, laws, mpl
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
_new = tuple.__new__     # a NamedTuple from its fields, without its Python-level __new__
_PEND_MAX = cython.declare(cython.longlong, mpl.PEND_MAX)
_PEND_TOL = cython.declare(cython.double, mpl.PEND_TOL)
_INF = cython.declare(cython.double, math.inf)
# the forecast and its band stay within REACH x the loss's range of what the run has shown
REACH = 0.5
_REACH = cython.declare(cython.double, REACH)


@cython.locals(r=cython.double)
def _exp(x: float) -> float:
    """``math.exp``: an overflow raises (C's exp returns inf)."""
    r = exp(x)
    if r == _INF and x != _INF:
        raise OverflowError("math range error")
    return r


def _log(x: float) -> float:
    """``math.log``: zero or a negative raises (C's log returns -inf or nan)."""
    if x <= 0.0:
        raise ValueError("math domain error")
    return log(x)


if not cython.compiled:               # pure build: Python's own, no extra call
    _exp = math.exp                   # noqa: F811
    _log = math.log                   # noqa: F811


@cython.locals(r0=list, r1=list, r2=list, r3=list, v=cython.double, c00=cython.double,
               c01=cython.double, c02=cython.double, c11=cython.double, c12=cython.double,
               c22=cython.double, c03=cython.double, c13=cython.double, c23=cython.double,
               c33=cython.double)
def _quad(g0: float, g1: float, g2: float, g3: float, c: list) -> float:
    """`laws._quad`, typed: ``g C g`` for a symmetric 4x4 ``C`` (3x3 when ``g3`` is 0)."""
    r0, r1, r2 = c[0], c[1], c[2]
    c00, c01, c02, c11, c12, c22 = r0[0], r0[1], r0[2], r1[1], r1[2], r2[2]
    v = (g0 * g0 * c00 + g1 * g1 * c11 + g2 * g2 * c22
         + 2.0 * (g0 * g1 * c01 + g0 * g2 * c02 + g1 * g2 * c12))
    if g3:
        r3 = c[3]
        c03, c13, c23, c33 = r0[3], r1[3], r2[3], r3[3]
        v += g3 * g3 * c33 + 2.0 * g3 * (g0 * c03 + g1 * c13 + g2 * c23)
    return v


if not cython.compiled:               # pure build: the original (no second copy runs)
    _quad = laws._quad                # noqa: F811


# bin layout: [index, count, sum of x0, sum of x1, sum of y, last step]
@cython.cclass
class ForecastDetector(Detector):
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

    # --- state the snapshot sees as lists ----------------------------------------------
    @property
    def _bins(self) -> list:
        """The summary: the closed bins and the open one, as lists (a new list)."""
        if not self._has_open:
            return []
        return self._closed + [[self._ok, self._on, self._ox0, self._ox1, self._oy, self._ostep]]

    @_bins.setter
    def _bins(self, bins: list) -> None:
        self._has_open = len(bins) > 0
        if self._has_open:
            b = bins[-1]
            self._ok, self._on, self._ox0, self._ox1, self._oy, self._ostep = b
            self._closed = [list(c) for c in bins[:-1]]
        else:
            self._closed = []

    @property
    def _pend(self) -> list | None:
        """The pending LR changes: ``[sum, sum |.|, |.|-weighted sums of lr and of s, first
        lr, first s, count]``, or None."""
        if self._pn == 0:
            return None
        return [self._pd, self._pw, self._pwl, self._pws, self._pl0, self._ps0, self._pn]

    @_pend.setter
    def _pend(self, g: list | None) -> None:
        if g is None:
            self._pn = 0
        else:
            self._pd, self._pw, self._pwl, self._pws, self._pl0, self._ps0, self._pn = g

    # --- summary -------------------------------------------------------------------
    @cython.locals(k=cython.longlong, lo=cython.double, closed=list)
    def _add(self, step: int, x0: float, x1: float, y: float) -> None:
        if self._has_open and step + 1.0 < self._edge:
            k = self._ok
        else:
            k = int(_log(step + 1.0) / self._lb)
            self._edge = self._c_bin_ratio ** (k + 1)
        if not self._has_open or self._ok != k:
            if self._has_open:
                self._closed.append([self._ok, self._on, self._ox0, self._ox1, self._oy, self._ostep])
            self._has_open = True
            self._ok, self._on, self._ox0, self._ox1, self._oy, self._ostep = k, 1, x0, x1, y, step
            lo = self._c_fit_from * step
            closed = self._closed
            while len(closed) > 0 and closed[0][5] < lo:
                closed.pop(0)
        else:
            self._on += 1
            self._ox0 += x0
            self._ox1 += x1
            self._oy += y
            self._ostep = step

    @cython.cpow(True)             # a positive base: C's pow, as Python's (not complex)
    @cython.locals(dt=cython.double, last=cython.longlong, prev=cython.double,
                   s=cython.double, delta=cython.double, w=cython.double)
    def _schedule(self, step: int, lr: float) -> bool:
        """The LR's areas and the mpl buckets; False for a non-finite LR (ignored). The
        caller then sets ``_lr`` (its own object: nothing is allocated)."""
        if not isfinite(lr):
            return False
        dt = 1.0
        if self._last is not None:
            last = self._last
            dt = step - last if step - last > 0 else 0
        prev = lr if self._lr is None else self._lr
        self._mom = self._mom * self._c_anneal ** dt + (prev - lr)
        s = self._s1
        self._s1 += lr * dt
        self._s2 += self._mom * dt
        if self._lr is None and self._has_open:
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
            if self._pn > 0 and (self._pd > 0.0) == (delta > 0.0) and self._pn < _PEND_MAX \
                    and -_PEND_TOL * self._pl0 <= lr - self._pl0 <= _PEND_TOL * self._pl0:
                self._pd += delta
                self._pw += w
                self._pwl += w * lr
                self._pws += w * s
                self._pn += 1
            else:
                if self._pn > 0:
                    self._flush()
                self._pd, self._pw, self._pwl, self._pws = delta, w, w * lr, w * s
                self._pl0, self._ps0, self._pn = lr, s, 1
                if w > _PEND_TOL * lr:
                    self._flush()
        return True

    def _flush(self) -> None:
        """The pending LR changes into the mpl buckets (and the live cache), as one."""
        d, w, wlr, ws = self._pd, self._pw, self._pwl, self._pws
        self._pn = 0
        m = wlr / w                              # max(wlr / w, 1e-8 * lrmax, 1e-300), as Python's
        if 1e-8 * self._lrmax > m:
            m = 1e-8 * self._lrmax
        if 1e-300 > m:
            m = 1e-300
        le = math.log(m)
        s = ws / w
        if self._has_open:
            first = self._closed[0] if self._closed else self._bins[-1]
            ref = first[2] / first[1]
        else:
            ref = s
        mpl.add(self._bk, d, le, s, ref)
        if self._mc is not None:
            mpl.note(self._mc, self._p, d, le, s)

    # --- fit ------------------------------------------------------------------------
    def _refit(self, step: int) -> None:
        if self._pn > 0:
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
        unit = self._hi - self._lo             # the fit's units: the run's range, from its lowest
        scale = self._noise * 1.2533 if self._p is not None else float(
            np.median(np.abs(np.diff(y[f]))) + 1e-9 * unit) * math.sqrt(float(np.median(n[f])))
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
        out = lawfit.fit(law, X[f], y[f], n[f], scale, warm, aux, freeze, self._lrmax or None,
                       ref=(self._lo, unit))
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

    @cython.locals(p=list, q=list, p0=cython.double, p1=cython.double, p2=cython.double,
                   p3=cython.double, e=cython.double, t0=cython.double, xt=cython.double,
                   lx=cython.double, k=cython.double, var=cython.double, pred=cython.double)
    def _law_at(self, x0: float, x1: float) -> float:
        """`laws.predict` and `laws.value` (of the previous fit) at ``x``, typed: the
        forecast; its variance and the disagreement go to ``_vpred``, ``_dv``."""
        law, p = self._law, self._p
        if law == "exp":
            x0 = x0 - 1.0
            p0, p1, p2 = p[0], p[1], p[2]
            k = _exp(p2)
            e = _exp(p1 - k * x0)
            var = _quad(1.0, e, -e * x0 * k, 0.0, self._cov)
            pred = p0 + e
        elif law == "power":
            p0, p1, p2, p3 = p[0], p[1], p[2], p[3]
            t0 = _exp(p3)
            xt = x0 + t0
            lx = _log(xt)
            e = _exp(p1 - p2 * lx)
            var = _quad(1.0, e, -e * lx, -p2 * e * t0 / xt, self._cov)
            pred = p0 + e
        else:
            p0, p1, p2, p3 = p[0], p[1], p[2], p[3]
            lx = _log(x0)
            e = _exp(p1 - p2 * lx)
            var = _quad(1.0, e, -e * lx, -x1, self._cov)
            pred = p0 + e - p3 * x1
        self._vpred = var if not 0.0 > var else 0.0      # max(var, 0.0), as Python's
        self._has_dv = self._prev is not None
        if self._has_dv:
            q = self._prev
            if law == "power":
                p0, p1, p2, p3 = q[0], q[1], q[2], q[3]
                e = p0 + _exp(p1 - p2 * _log(x0 + _exp(p3)))
            elif law == "exp":
                p0, p1, p2 = q[0], q[1], q[2]
                e = p0 + _exp(p1 - _exp(p2) * x0)
            else:
                p0, p1, p2, p3 = q[0], q[1], q[2], q[3]
                e = p0 + _exp(p1 - p2 * _log(x0)) - p3 * x1
            self._dv = e - pred
        return pred

    @cython.locals(c=list, p=list, q=list, s_a=cython.double, reach=cython.double,
                   ld=cython.double, l1=cython.double, l2=cython.double, v0=cython.double,
                   v1=cython.double, v2=cython.double, cll=cython.double, dprev=cython.double,
                   q1=cython.double, q1s=cython.double, q2=cython.double, q2s=cython.double,
                   q2ss=cython.double, p0=cython.double, p1=cython.double, p2=cython.double,
                   p3=cython.double, beta=cython.double, d=cython.double, new=cython.double,
                   ls1=cython.double, e=cython.double, g2=cython.double, var=cython.double)
    def _mpl_at(self, s1: float) -> float:
        """Multi-power-law forecast at ``S1 = s1`` from the cache (refreshed when S1 moved
        past its reach; the Taylor step is `mpl.drop`'s), its variance to ``_vpred`` and
        the previous fit's disagreement to ``_dv``."""
        p = self._p
        c = self._mc
        if c is not None:
            s_a, reach = c[0], c[4]                     # mpl.S_A, mpl.DMAX
        if c is None or s1 - s_a > reach:
            c = self._mc = mpl.anchor(self._bk, p, self._cov, self._prev, s1,
                                      mpl.TOL_NOISE * 1.2533 * self._noise)
        # the cache's layout (`mpl`): S_A, LD, L1, L2, DMAX, V0, V1, V2, CLL, DPREV, Q1, ...
        s_a, ld, l1, l2, v0, v1, v2, cll, dprev = c[0], c[1], c[2], c[3], c[5], c[6], c[7], c[8], c[9]
        q1, q1s, q2, q2s, q2ss = c[10], c[11], c[12], c[13], c[14]
        p0, p1, p2, p3, beta = p[0], p[1], p[2], p[3], p[5]
        d = s1 - s_a                                    # mpl.drop(c, p, s1)
        new = beta * (d * q1 - q1s) - 0.5 * beta * (beta + 1.0) * (
            d * d * q2 - 2.0 * d * q2s + q2ss)
        ld = ld + d * (l1 + 0.5 * d * l2) + p3 * new
        ls1 = _log(s1)
        e = _exp(p1 - p2 * ls1)
        g2 = -e * ls1
        var = (_quad(1.0, e, g2, 0.0, self._cov)
               + 2.0 * (v0 + e * v1 + g2 * v2) + cll)
        self._vpred = var if var > 0.0 else 0.0
        self._has_dv = self._prev is not None
        if self._has_dv:
            q = self._prev
            q1, q1s, q2 = q[0], q[1], q[2]
            self._dv = q1 + _exp(q1s - q2 * ls1) - e - p0 - dprev
        return p0 + e - ld

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
