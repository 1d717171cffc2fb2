# The C side of early_rise.py (docs/COMPILED.md).
from .base cimport Detector, Point

cdef long long NO_STEP

cdef class EarlyRiseDetector(Detector):
    cdef readonly object ratio, points, start_points, window
    cdef double _c_ratio, _c_back
    cdef long long _c_points, _c_start_points, _c_window
    cdef public long long _last, _n, _since
    cdef public list _head, _recent
    cdef public double _start
    cdef public bint _on, _done
    cdef readonly bint active
    cpdef observe(self, long long step, double loss)
    cdef inline int _observe(self, long long step, double loss) except -1
    cdef int see(self, Point p) except -1
    cdef bint asks(self) except -1
