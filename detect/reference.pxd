# The C side of reference.py (docs/COMPILED.md).
from libc.math cimport exp, fabs, isfinite, log, sqrt

cdef double NAN, GAP, MAD, INF, HIST_STEP
cdef Py_ssize_t HIST_MAX
cdef long long NO_STEP


cdef class ReferenceTracker:
    cdef readonly object references, config
    cdef double _c_gate, _c_ngate, _c_hl, _c_persist, _c_lrtol, _c_lag, _c_warm, _c_tau, _c_far, _c_lrlag, _c_stuck, _c_keep, _c_swarm
    cdef long long _c_minpts
    cdef public list _xs, _lv, _lr, _names, _noise, _start, _has_lr, _cur, _curl, _lv_now, _lrbad, _lrref, _hx, _hlv
    cdef public object _tok
    cdef public int _by_tokens, _state, _worst
    cdef public long long _n, _since, _held, _step, _cstep
    cdef public double _x, _dt, _level, _prev, _scat, _gx, _gprev, _wander, _gap, _units, _spread, _lrnow, _fall, _rlv, _floor
    cdef public bint _resolved, _cond, _still, _sched, _stuck, _log

    cpdef int feed(self, long long step, double loss, double lr=*, double tokens=*) except? -1
    cdef bint _holds(self, long long step) except -1
    cdef void _level_in(self, double x, double loss) except *
    cdef void _own(self, double x) except *
    cdef double _fell(self, double x) except? -1.0
    cdef double _at(self, int i, double x, list cur, list ys) except? -1.0
    cdef int _compare(self, double x, double lr) except? -1
    cdef void _wander_in(self, double x) except *
