from libc.math cimport isfinite

from .base cimport Detector

cdef long long NO_STEP

cdef class NonfiniteDetector(Detector):
    cdef public long long _count, _first
    cdef readonly bint active
    cpdef observe(self, long long step, double loss)
