# The C side of chance.py (docs/COMPILED.md).
from .base cimport Detector, Point

cdef long long NO_STEP
cdef double NAN, EXIT, LOWEST, HIGHEST

cdef class ChanceDetector(Detector):
    cdef readonly double level, tolerance, guess_tolerance
    cdef readonly long long points, guess_points
    cdef double _c_band
    cdef long long _c_points
    cdef public long long _last, _at, _n
    cdef public double _prev, _guess, _lr_peak
    cdef public bint _leaving
    cdef readonly bint active
    cpdef observe(self, long long step, double loss, object lr=*)
    cdef inline int _observe(self, long long step, double loss, object lr) except -1
    cdef inline int _follow_guess(self, double loss, double prev) except -1
    cdef inline bint _held(self) except -1
    cdef int see(self, Point p) except -1
    cdef bint asks(self) except -1
