"""`ForecastFit`: the learned state of the `forecast` detector and what fits it.

The base class of `forecast.ForecastDetector` (which adds the arguments, the per-update
path and the restore of a snapshot). Each update adds the loss to a bounded, log-spaced
summary (`_add`: bins a fixed ratio wide in step, those older than ``fit_from`` x the
step dropped); `_schedule` keeps the learning-rate area and, for the ``mpl`` law, the
pending LR changes that `_flush` hands to `mpl`'s buckets; `_refit` fits the law on the
summary (`lawfit.fit`); `_law_at`/`_mpl_at` give the fitted law's value and variance at
a point.

Compiled (docs/COMPILED.md), the fields are C fields declared in ``forecast_fit.pxd``
and the open bin and the pending LR changes live in typed fields (the ``_bins`` and
``_pend`` of a snapshot are properties over them). The fitted parameters are read from
their lists, and the law's value, its variance and the multi-power cache's Taylor step
are written out here (`_law_at`, `_mpl_at`) as typed copies of `laws.predict`/
`laws.value` and `mpl.drop` (tests/test_laws.py holds them equal). The refit, the
buckets and the cache refresh stay Python-object code (numpy), amortized. The math
functions are C's in the compiled build, guarded (`_exp`, `_log`) so that a value
outside their domain raises as Python's ``math`` does.
"""

from __future__ import annotations

import math

import numpy as np

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (forecast_fit.pxd)
    from math import exp, isfinite, log

from . import lawfit, laws, mpl
from .base import Detector

# mpl: the drop's shape is fitted once the fitted bins have seen LR decreases of this x the peak
SHAPE_AFTER = 0.2
_PEND_MAX = cython.declare(cython.longlong, mpl.PEND_MAX)
_PEND_TOL = cython.declare(cython.double, mpl.PEND_TOL)
_INF = cython.declare(cython.double, math.inf)
_NAN = cython.declare(cython.double, math.nan)
# the fitted law as a C int (`ForecastFit._predict`): `_SCHEDULE` for any other
_SCHEDULE = cython.declare(cython.int, 0)
_POWER = cython.declare(cython.int, 1)
_EXP = cython.declare(cython.int, 2)
_MPL = cython.declare(cython.int, 3)
_LAW_CODE = {"power": _POWER, "exp": _EXP, "mpl": _MPL}


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


# bin layout: [index, count, sum of x0, sum of x1, sum of y, last step]
@cython.cclass
class ForecastFit(Detector):
    """The forecast's summary, LR bookkeeping, refit and typed law (`forecast.ForecastDetector`)."""

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

    def _predict(self, x0: float, x1: float) -> float:
        """The fitted law's forecast at ``(x0, x1)`` (`_mpl_at` or `_law_at`). The law is
        read as a C int (``_law_c``), again only when ``_law`` is another object than the
        last one read (a refit, a restore): the per-update path compares no strings."""
        if self._law is not self._law_seen:
            self._law_seen = self._law
            self._law_c = _LAW_CODE.get(self._law, _SCHEDULE)
        return self._mpl_at(x0) if self._law_c == _MPL else self._law_at(x0, x1)

    @cython.locals(r0=list, r1=list, r2=list)
    def _read_cov(self) -> None:
        """The entries of the fit's covariance ``_cov`` that `_var` reads, as C doubles
        (``_q00``...), and the list they were read from (``_cov_seen``). Without a fourth
        parameter (the exp law's 3x3), its entries are NaN: `_var` then never reads them."""
        c = self._cov
        r0, r1, r2 = c[0], c[1], c[2]
        self._q00, self._q01, self._q02 = r0[0], r0[1], r0[2]
        self._q11, self._q12, self._q22 = r1[1], r1[2], r2[2]
        if len(c) > 3:
            self._q03, self._q13, self._q23, self._q33 = r0[3], r1[3], r2[3], c[3][3]
        else:
            self._q03 = self._q13 = self._q23 = self._q33 = _NAN
        self._cov_seen = c

    def _read_params(self) -> None:
        """The fit's parameters ``_p`` and the previous fit's ``_prev`` (its law's: None
        when there is none) as C doubles for `_law_at` (``_p0``..., ``_r0``...; NaN past
        the law's own), and the lists they were read from (``_p_seen``, ``_prev_seen``)."""
        p, q = self._p, self._prev
        self._p0, self._p1, self._p2 = p[0], p[1], p[2]
        self._p3 = p[3] if len(p) > 3 else _NAN
        if q is not None:
            self._r0, self._r1, self._r2 = q[0], q[1], q[2]
            self._r3 = q[3] if len(q) > 3 else _NAN
        self._p_seen, self._prev_seen = p, q

    @cython.locals(v=cython.double)
    def _var(self, g0: float, g1: float, g2: float, g3: float) -> float:
        """`laws.quad` of the fit's covariance: ``g C g``, the same operations in the same
        order, from its entries as C doubles, read again only when ``_cov`` is another
        list than the last one read (a refit, a restore: `_read_cov`)."""
        if self._cov is not self._cov_seen:
            self._read_cov()
        v = (g0 * g0 * self._q00 + g1 * g1 * self._q11 + g2 * g2 * self._q22
             + 2.0 * (g0 * g1 * self._q01 + g0 * g2 * self._q02 + g1 * g2 * self._q12))
        if g3:
            v += g3 * g3 * self._q33 + 2.0 * g3 * (g0 * self._q03 + g1 * self._q13
                                                   + g2 * self._q23)
        return v

    @cython.locals(p0=cython.double, p1=cython.double, p2=cython.double,
                   p3=cython.double, e=cython.double, t0=cython.double, xt=cython.double,
                   lx=cython.double, k=cython.double, var=cython.double, pred=cython.double,
                   law=cython.int)
    def _law_at(self, x0: float, x1: float) -> float:
        """`laws.predict` and `laws.value` (of the previous fit) at ``x``, typed: the
        forecast; its variance and the disagreement go to ``_vpred``, ``_dv``. The
        parameters are read as C doubles again only when ``_p`` or ``_prev`` is another
        list than the last one read (a refit, a restore: `_read_params`)."""
        if self._p is not self._p_seen or self._prev is not self._prev_seen:
            self._read_params()
        law = self._law_c
        p0, p1, p2, p3 = self._p0, self._p1, self._p2, self._p3
        if law == _EXP:
            x0 = x0 - 1.0
            k = _exp(p2)
            e = _exp(p1 - k * x0)
            var = self._var(1.0, e, -e * x0 * k, 0.0)
            pred = p0 + e
        elif law == _POWER:
            t0 = _exp(p3)
            xt = x0 + t0
            lx = _log(xt)
            e = _exp(p1 - p2 * lx)
            var = self._var(1.0, e, -e * lx, -p2 * e * t0 / xt)
            pred = p0 + e
        else:
            lx = _log(x0)
            e = _exp(p1 - p2 * lx)
            var = self._var(1.0, e, -e * lx, -x1)
            pred = p0 + e - p3 * x1
        self._vpred = var if not 0.0 > var else 0.0      # max(var, 0.0), as Python's
        self._has_dv = self._prev is not None
        if self._has_dv:
            p0, p1, p2, p3 = self._r0, self._r1, self._r2, self._r3
            if law == _POWER:
                e = p0 + _exp(p1 - p2 * _log(x0 + _exp(p3)))
            elif law == _EXP:
                e = p0 + _exp(p1 - _exp(p2) * x0)
            else:
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
        var = (self._var(1.0, e, g2, 0.0)
               + 2.0 * (v0 + e * v1 + g2 * v2) + cll)
        self._vpred = var if var > 0.0 else 0.0
        self._has_dv = self._prev is not None
        if self._has_dv:
            q = self._prev
            q1, q1s, q2 = q[0], q[1], q[2]
            self._dv = q1 + _exp(q1s - q2 * ls1) - e - p0 - dprev
        return p0 + e - ld
