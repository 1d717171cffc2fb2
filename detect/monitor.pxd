# The C side of monitor.py (docs/COMPILED.md): typed references to the detectors it calls
# per event. forecast/plateau/effect/overfit are called through Python until they are
# cclasses declared in their .pxd.
from .divergence cimport DivergenceDetector
from .gradnorm cimport GradNormDetector
from .nonfinite cimport NonfiniteDetector
from .resume cimport ResumeDetector
from .rise cimport RiseDetector
from .spike cimport SpikeDetector

cdef long long NO_STEP

cdef class RunMonitor:
    cdef readonly object preset, overrides
    cdef dict _d, _emitted
    cdef str _main
    cdef bint _alert, _fc_observe, _pl_observe
    cdef readonly object _points
    cdef double _next_at
    cdef public dict peak_scores
    cdef list _out
    cdef ResumeDetector _rj
    cdef NonfiniteDetector _nf
    cdef GradNormDetector _gn
    cdef SpikeDetector _sp
    cdef DivergenceDetector _dv
    cdef RiseDetector _ri
    cdef object _fc, _pl, _ef, _ov

    cdef void _setup(self, dict d) except *
    cdef bint _due(self, str kind, bint active, str severity) except -1
    cdef void _push(self, str kind, bint active, str severity, object step, str text) except *
    cdef bint _big(self, str kind, double effect) except -1
    cdef str _size(self, double effect)
    cdef double _rise(self, object l_pred) except? -1.0
    cdef object _rewind(self, long long step)
    cdef void _arbitrate(self, object step, object loss, object fc, object pl, bint fc_alert,
                         bint pl_active, bint rising, bint explained) except *
