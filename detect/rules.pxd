# The C side of rules.py (docs/COMPILED.md): the named rules, C functions of a typed
# arbiter and point; the monitor cimports the ones it calls. Each returns 0 (or its bint),
# or -1 with the exception set: a test of the value, where a void function would be
# followed by a PyErr_Occurred() call per rule and update.
from .arbiter cimport AS_DRIFT, AS_PLATEAU, UNNAMED, Arbiter
from .base cimport Detector, Point

cdef double _NAN
cdef int _RJ, _NF, _DV, _SP, _PL, _DR, _TP, _MEM

cdef int resume(Arbiter a, Point p) except -1
cdef bint obvious(Arbiter a, Point p) except -1
cdef int schedule(Arbiter a, Point p) except -1
cdef bint judging(Arbiter a, Point p) except -1
cdef int judge(Arbiter a, Point p) except -1
cdef int timing(Arbiter a, Point p, Detector det, str kind, int bit) except -1
cdef int divergence(Arbiter a, Point p) except -1
cdef bint shift(Arbiter a, double up) except -1
cdef bint absorbed(Arbiter a, str kind) except -1
cdef int spike(Arbiter a, Point p) except -1
cdef int slowdown_name(Arbiter a, Point p) except -1
cdef int plateau(Arbiter a, Point p) except -1
cdef bint stalled_risen(Arbiter a) except -1
cdef bint own_pages(Arbiter a, Point p) except -1
cdef int drift(Arbiter a, Point p) except -1
cdef bint slower_only(Arbiter a, Point p) except -1
cdef void evaluation(Arbiter a, object step, double val) except *
cdef bint escalated(Arbiter a, Point p) except -1
cdef int drift_due(Arbiter a, Point p) except -1
