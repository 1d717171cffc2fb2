from libc.math cimport isfinite

from .base cimport Detector, gap_decay, Point

cdef long long NO_STEP

cdef class ResumeDetector(Detector):
    cdef readonly object z, scale_halflife
    cdef double _c_z, _c_scale_hl, _c_scale
    cdef public long long _last_step
    cdef public double _last_loss, _scale, _dt
    # the last observe()
    cdef readonly bint active
    cdef readonly object severity
    cdef readonly double jump
    cdef long long _from
    cpdef observe(self, long long step, double loss)
    cdef inline int _observe(self, long long step, double loss) except -1
    cpdef observe_resumed(self, long long step, double loss, long long from_step)
    cdef int see(self, Point p) except -1
    cdef long long went_back(self, long long step)
