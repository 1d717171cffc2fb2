# The C side of rules.py (docs/COMPILED.md): the named rules, C functions of a typed
# arbiter and point; the monitor cimports the ones it calls.
from .arbiter cimport AS_DRIFT, AS_PLATEAU, UNNAMED, Arbiter
from .base cimport Detector, Point

cdef double _NAN
cdef int _RJ, _NF, _DV, _SP, _PL, _DR, _TP, _MEM

cdef void resume(Arbiter a, Point p) except *
cdef bint obvious(Arbiter a, Point p) except -1
cdef void schedule(Arbiter a, Point p) except *
cdef bint judging(Arbiter a, Point p) except -1
cdef void judge(Arbiter a, Point p) except *
cdef void timing(Arbiter a, Point p, Detector det, str kind, int bit) except *
cdef void divergence(Arbiter a, Point p) except *
cdef bint shift(Arbiter a, double up) except -1
cdef void spike(Arbiter a, Point p) except *
cdef void slowdown_name(Arbiter a, Point p) except *
cdef void plateau(Arbiter a, Point p) except *
cdef bint stalled_risen(Arbiter a) except -1
cdef bint own_pages(Arbiter a, Point p) except -1
cdef void drift(Arbiter a, Point p) except *
cdef void evaluation(Arbiter a, object step, double val) except *
cdef bint escalated(Arbiter a, Point p) except -1
cdef void drift_due(Arbiter a, Point p) except *
