from libc.math cimport exp, isfinite, log

from .base cimport Detector, Point

cdef class GradNormDetector(Detector):
    cdef readonly object ratio, z, level_halflife, scale_halflife, warmup
    cdef double _c_z, _c_level, _c_scale, _c_log_ratio
    cdef long long _c_warmup
    cdef public double _level, _scale
    cdef public long long _n, _bad_count
    cdef public object _last, _bad
    cdef public bint _in
    # the last observe()
    cdef readonly double last_ratio
    cdef readonly bint surge
    cpdef observe(self, long long step, double g)
    cdef inline int _observe(self, long long step, double g) except -1
    cdef int see(self, Point p) except -1
