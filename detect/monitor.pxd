# The C side of monitor.py (docs/COMPILED.md): its typed references (the arbiter, the
# point, the detectors it reads), the per-update methods and the C API it builds a
# MonitorState with.
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM

cdef extern from "Python.h":
    object PyType_GenericAlloc(type t, Py_ssize_t nitems)   # Cython's own takes an object

from .arbiter cimport Arbiter
from .base cimport Detector, Point
from .forecast cimport ForecastDetector
from .resume cimport ResumeDetector
from .rewind cimport RewindPoints
from .rules cimport evaluation, judge, judging, obvious, resume, schedule

cdef long long NO_STEP
cdef double _NAN

cdef object _state(object step, object l_obs, object l_pred, object band_lo, object band_hi,
                   object D, object Q, object T, object W, bint alert, tuple findings)
cdef void _put(object st, Py_ssize_t i, object v) noexcept
cdef int _feed(list dets, Point p) except -1
cdef void _timing(Point p, dict timing) except *
cdef void _untimed(Point p) except *

cdef class RunMonitor:
    cdef readonly object preset, overrides
    cdef readonly Arbiter arbiter
    cdef dict _d
    cdef Point _p
    cdef list _first, _level, _trend, _last
    cdef ResumeDetector _rj
    cdef ForecastDetector _fc
    cdef readonly RewindPoints _points
    cdef double _next_at

    cdef void _setup(self, dict d) except *
    cdef Point _point(self, object step, object loss, object lr, object grad_norm)
    cdef object _judge(self, Arbiter a, Point p)
    cdef object _rewind(self, long long step)
