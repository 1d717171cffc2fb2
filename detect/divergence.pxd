from libc.math cimport isfinite

from .base cimport Detector, gap_decay, Point

cdef long long NO_STEP
cdef long long MIN_POINTS

cdef class DivergenceDetector(Detector):
    cdef readonly object ratio, z, patience, halflife, scale_halflife, warmup, best_halflife
    cdef double _c_best_hl, _c_ratio, _c_z, _c_halflife, _c_scale_hl, _c_level, _c_scale
    cdef long long _c_patience, _c_warmup
    cdef public double _level, _scale, _best, _dt, _start, _excess
    cdef public long long _first, _last, _since, _points, _n
    # the last observe()
    cdef readonly bint active
    cdef readonly double level, best, excess
    cpdef observe(self, long long step, double loss)
    cdef inline int _observe(self, long long step, double loss) except -1
    cdef int see(self, Point p) except -1
