# The C side of effect.py (docs/COMPILED.md).
from libc.math cimport isfinite, sqrt

from .base cimport Detector, gap_decay, Point


cdef class EffectDetector(Detector):
    # constructor arguments, as given (repr, clone): read into typed locals where used
    cdef readonly object gate, jump_gate, stall_gate, rho, halflife, min_points, wobble_samples
    cdef readonly object start_points, clip
    cdef readonly bint falls
    cdef double _c_tau, _c_g                             # cache: the per-step weight
    cdef public long long _n, _first, _last, _k, _kw
    cdef public double _dt, _noise, _prev, _level, _fast, _start, _best, _next
    cdef public double _pred_best, _lr_peak, _lr_low, _wob
    cdef public bint _lr_up
    cdef public list _lags, _devs

    cpdef void feed(self, long long step, double loss, bint judging=*, object l_pred=*,
                    object lr=*) except *
    cdef inline int _feed(self, long long step, double loss, bint judging, object l_pred,
                          object lr) except -1
    cdef void _sample(self, double level, bint judging) except *
    cdef double _progress(self) noexcept
    cdef double _unit(self) noexcept
    cdef double _wobble(self, double wobble, double noise) except? -1.0
    cdef bint _first_window(self) except -1
    cpdef double fast_rise(self) except? -1.0
    cpdef double forecast_rise(self, object l_pred, object lr) except? -1.0
    cpdef double score(self, double effect, bint jump=*) except? -1.0
    cdef int see(self, Point p) except -1
