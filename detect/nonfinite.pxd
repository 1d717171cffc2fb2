from libc.math cimport isfinite

from .base cimport Detector, Point

cdef long long NO_STEP

cdef class NonfiniteDetector(Detector):
    cdef readonly object blowup, ref_points, grad_run, start_run
    cdef double _c_blowup
    cdef long long _c_ref_points, _c_grad_run, _c_start_run
    cdef public long long _count, _first, _n_ref, _grun, _gfirst
    cdef public double _ref, _prev
    cdef public bint _gseen
    cdef readonly bint active, blown, grad_bad
    cdef readonly str reason
    cpdef observe(self, long long step, double loss, object grad=*)
    cdef inline int _observe(self, long long step, double loss, object grad) except -1
    cdef int see(self, Point p) except -1
