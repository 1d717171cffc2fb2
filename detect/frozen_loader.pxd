from libc.math cimport exp, isfinite, log

from .base cimport Detector, Point
from .resolution cimport decimals, quantum

cdef long long NO_STEP
cdef double _NOISY
cdef long long RAW

cdef class FrozenLoaderDetector(Detector):
    cdef readonly object ratio, fast_halflife, slow_halflife, warmup
    cdef double _c_log_ratio, _c_fast, _c_slow
    cdef long long _c_warmup, _c_hdec
    cdef double _c_half
    cdef public long long _last, _n, _dec
    cdef public double _prev, _dprev, _fast, _slow, _lf, _ls, _flips
    cdef public bint _on, _up
    cdef readonly bint active
    cpdef observe(self, long long step, double loss)
    cdef inline int _observe(self, long long step, double loss) except -1
    cdef inline double _half_digit(self)
    cdef int see(self, Point p) except -1
    cdef bint asks(self) except -1
