from libc.math cimport isfinite, log

from .base cimport Detector, Point

cdef long long NO_STEP
cdef double _GIB

cdef class MemoryDetector(Detector):
    cdef readonly object horizon_s, halflife, r2, min_span_s, warmup, patience
    cdef double _c_k, _c_fk
    cdef public long long _s, _s0, _n, _run, _ckpt
    cdef public double _t0, _w, _st, _sm, _stt, _stm, _smm, _fw, _fst, _fsm, _fstt, _fstm
    cdef public double _first_ts, _last_ts, _last_m, _total, _ts0
    cdef public str _kind
    cdef public bint _on, _crit
    cdef readonly bint active
    cdef readonly double eta_s, slope
    cpdef observe(self, long long step, double ts, double allocated, double reserved,
                  double total)
    cdef void _judge(self, double t)
    cdef int see(self, Point p) except -1
    cdef bint asks(self) except -1
