from libc.math cimport exp, isfinite, log

from .base cimport Detector, Point

cdef long long NO_STEP

cdef class ThroughputDetector(Detector):
    cdef readonly object ratio, halflife, base_halflife, clip, warmup, hold_s, hold_points
    cdef double _c_lr, _c_back, _c_clip, _c_fast, _c_slow, _c_hold_s
    cdef long long _c_warmup, _c_hold_points
    cdef public long long _s, _phase, _gpus, _n, _onset, _on_n, _base_from, _base_to
    cdef public double _ts, _tok, _base, _level, _share, _wait, _wait_base, _onset_ts, _tps
    cdef public bint _on
    cdef readonly bint active
    cdef void _reset(self)
    cpdef observe(self, long long step, double ts, double step_time, double tokens,
                  double data_wait)
    cdef inline int _observe(self, long long step, double ts, double step_time,
                             double tokens, double data_wait) except -1
    cdef void _judge(self, long long step, double ts)
    cdef int see(self, Point p) except -1
    cdef bint asks(self) except -1
