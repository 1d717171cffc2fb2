from libc.math cimport isfinite

from .base cimport Detector, gap_decay, Point

cdef long long NO_STEP, WARM_POINTS

cdef class SpikeDetector(Detector):
    cdef readonly object z, recover, recover_z, level_halflife, scale_halflife, warmup, min_points
    cdef double _c_z, _c_recover_z, _c_level_hl, _c_scale_hl, _c_min_points, _c_level, _c_scale
    cdef long long _c_recover, _c_warmup
    cdef public double _level, _scale, _height, _held, _dt, _prev
    cdef public long long _last, _first, _open, _later, _n
    cdef public bint _sustained
    # the last observe()
    cdef readonly double last_z, height
    cdef readonly bint active
    cdef readonly object severity
    cdef long long _since

    cpdef observe(self, long long step, double loss)
    cdef inline int _observe(self, long long step, double loss) except -1
    cdef inline void _follow(self, long long step, double loss, double z)
    cdef inline void _learn(self, double loss, double dt, double usual, bint level)
    cdef int see(self, Point p) except -1
