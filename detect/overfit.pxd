# The C side of overfit.py (docs/COMPILED.md).
from libc.math cimport isfinite

from .base cimport Detector, decay, Point


cdef class OverfitDetector(Detector):
    cdef readonly object rise, train_drop, patience, min_evals, halflife, noise_z, span, quick  # as given
    cdef double _c_halflife, _c_train
    # learned state (STATE)
    cdef public double _vfirst, _vnoise, _tfirst, _train, _best, _train_at_best, _vmin
    cdef public long long _tstep, _evals, _above
    cdef public list _vprev
    # the last observe() (OverfitState's fields; ``train`` NaN for None)
    cdef readonly long long step
    cdef readonly bint active, quick_hit
    cdef readonly double val, best_val, train, val_mean, margin
    cdef readonly long long above

    cpdef void update_train(self, long long step, double loss) except *
    cdef inline int _update_train(self, long long step, double loss) except -1
    cpdef bint observe(self, long long step, double val) except -1
    cdef int see(self, Point p) except -1
