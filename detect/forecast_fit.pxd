# The C side of forecast_fit.py (docs/COMPILED.md): the detector's typed fields (the base
# class holds them all: its methods and forecast.py's read them) and its fitting methods,
# and C's math (the .py binds Python's math functions under the same names uncompiled).
from libc.math cimport exp, isfinite, log

from .base cimport Detector

cdef long long _PEND_MAX
cdef double _PEND_TOL, _INF, _NAN
cdef int _SCHEDULE, _POWER, _EXP, _MPL

cdef double _exp(double x) except? -1.0
cdef double _log(double x) except? -1.0

cdef class ForecastFit(Detector):
    # constructor arguments, as given (repr, clone), and typed copies of those used per update
    cdef readonly object warmup, holdout, holdout_min, fit_from, bin_ratio, refit_ratio
    cdef readonly object refit_min, threshold, allowance, clip, gate, noise_halflife
    cdef readonly object d_halflife, band_z, bias_z, freeze, anneal_decay, law
    cdef double _c_holdout, _c_holdout_min, _c_fit_from, _c_bin_ratio, _c_threshold
    cdef double _c_allowance, _c_clip, _c_gate, _c_noise_hl, _c_d_hl, _c_band_z, _c_bias_z
    cdef double _c_freeze, _c_anneal, _c_d, _c_noise
    cdef bint _c_mpl
    # learned state (STATE): the None-able values are Python objects, as in Python
    cdef public double _lb, _edge, _dt, _s1, _s2, _mom, _lrmax, _lrlow, _misfit, _noise, _S, _D
    cdef public object _last, _lr, _mc, _law, _p, _cov, _prev, _level, _next, _since
    cdef public list _bk
    cdef public bint _warm, _restart, _shaped, _alarm
    cdef public long long _fits
    cdef public double _lo, _hi
    cdef public bint _neg
    # the summary's bins (`_bins`): the closed ones, and the open one typed
    cdef list _closed
    cdef bint _has_open
    cdef long long _ok, _on, _ostep
    cdef double _ox0, _ox1, _oy
    # the pending LR changes (`_pend`): count (0: none) and sums
    cdef long long _pn
    cdef double _pd, _pw, _pwl, _pws, _pl0, _ps0
    # the last observe(): ForecastState's fields, the same values (None before a fit)
    cdef readonly object step, l_obs, l_pred, band_lo, band_hi, D, Q, T, W
    cdef readonly double S
    cdef readonly bint alert
    # scratch of _law_at/_mpl_at: the forecast's variance, the previous fit's disagreement
    cdef double _vpred, _dv
    cdef bint _has_dv
    # `_law` as read by `_predict`: the object, and its code (`_POWER`, ...)
    cdef object _law_seen
    cdef int _law_c
    # `_var`'s copy of the covariance's entries, and the ``_cov`` it was read from
    cdef object _cov_seen
    cdef double _q00, _q01, _q02, _q03, _q11, _q12, _q13, _q22, _q23, _q33
    # `_law_at`'s copy of the parameters and the previous fit's, and the lists read
    cdef object _p_seen, _prev_seen
    cdef double _p0, _p1, _p2, _p3, _r0, _r1, _r2, _r3

    cdef void _add(self, long long step, double x0, double x1, double y) except *
    cdef bint _schedule(self, long long step, double lr) except -1
    cdef double _predict(self, double x0, double x1) except? -1.0
    cdef int _read_cov(self) except -1
    cdef int _read_params(self) except -1
    cdef inline double _var(self, double g0, double g1, double g2, double g3) except? -1.0
    cdef double _law_at(self, double x0, double x1) except? -1.0
    cdef double _mpl_at(self, double s1) except? -1.0
