# The C side of base.py (docs/COMPILED.md): a detector module cimports Detector and the
# EWMA weights from here ("from .base cimport ...") in its own .pxd.

cdef double _GAP

cpdef double decay(double dt, double halflife)
cpdef double gap_decay(double dt, double usual, double halflife)

cdef class Point:
    cdef public object step, loss, lr, grad, l_pred
    cdef public long long s, from_step
    cdef public double x
    cdef public bint fc_alert, judging, timed
    cdef public double ts, step_time, data_wait, tokens, mem_alloc, mem_reserved, mem_total
    cdef public long long gpus, phase

cdef class Detector:
    # `see` returns 0, or -1 with the exception set: a test of the value, where a void
    # function would be followed by a PyErr_Occurred() call on every update
    cdef int see(self, Point p) except -1
    cdef bint asks(self) except -1
