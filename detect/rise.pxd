from libc.math cimport isfinite, sqrt

from .base cimport Detector, decay, gap_decay, Point

cdef long long NO_STEP
cdef long long MIN_POINTS, LEVEL_POINTS
cdef double S_CAP

cdef class RiseDetector(Detector):
    cdef readonly object threshold, halflife, noise_halflife, clip, patience, warmup, level_z
    cdef readonly object jump_k, jump_h, jump_clip
    cdef double _c_threshold, _c_halflife, _c_noise_hl, _c_clip, _c_level_z
    cdef double _c_jump_k, _c_jump_h, _c_jump_clip, _c_noise, _c_level, _c_dt, _c_w
    cdef long long _c_patience, _c_warmup
    cdef public double _dt, _S, _score, _level, _noise, _best, _best_w, _prev
    cdef public long long _first, _last, _since, _points
    # the last observe()
    cdef readonly bint active
    cdef readonly double score, level, best, S
    cpdef observe(self, long long step, double loss)
    cdef inline int _observe(self, long long step, double loss) except -1
    cdef int see(self, Point p) except -1
