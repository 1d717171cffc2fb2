# The C side of arbiter.py (docs/COMPILED.md): the monitor's typed fields (the base class
# holds them all: its methods and monitor.py's read them), typed references to the
# detectors it reads, and the kinds' bits.
from .collapse cimport CollapseDetector
from .divergence cimport DivergenceDetector
from .effect cimport EffectDetector
from .forecast cimport ForecastDetector
from .gradnorm cimport GradNormDetector
from .nonfinite cimport NonfiniteDetector
from .overfit cimport OverfitDetector
from .plateau cimport PlateauDetector
from .resume cimport ResumeDetector
from .rewind cimport RewindPoints
from .rise cimport RiseDetector
from .spike cimport SpikeDetector

cdef long long NO_STEP
cdef double _NAN
cdef int _RJ, _NF, _DV, _SP, _PL, _DR

cdef class Arbiter:
    cdef readonly object preset, overrides
    cdef dict _d, _emitted, _held
    cdef object _rec
    cdef str _main
    cdef bint _alert
    cdef int _pl_mode, _kinds
    cdef readonly RewindPoints _points
    cdef double _next_at, _dv_at
    cdef public dict peak_scores
    cdef list _out
    cdef ResumeDetector _rj
    cdef NonfiniteDetector _nf
    cdef GradNormDetector _gn
    cdef CollapseDetector _co
    cdef SpikeDetector _sp
    cdef DivergenceDetector _dv
    cdef RiseDetector _ri
    cdef ForecastDetector _fc      # or its subclass FinetuningDetector (the finetuning preset)
    cdef PlateauDetector _pl
    cdef EffectDetector _ef
    cdef OverfitDetector _ov

    cdef bint _due(self, str kind, bint active, str severity) except -1
    cdef void _push(self, str kind, bint active, str severity, object step, str text) except *
    cdef void _escalate(self, object step) except *
    cdef bint _big(self, str kind, double effect) except -1
    cdef bint _stalled(self, PlateauDetector pl, bint risen=*) except -1
    cdef bint _incident(self, str but=*) except -1
    cdef str _size(self, double effect)
    cdef double _rise(self, object l_pred) except? -1.0
    cdef double _drift_effect(self, ForecastDetector fc, PlateauDetector pl, bint fc_alert, bint rising,
                              bint pl_up) except? -1.0
    cdef double _progress(self) except? -1.0
    cdef void _arbitrate(self, object step, object loss, ForecastDetector fc, PlateauDetector pl,
                         bint fc_alert, bint pl_active, bint rising, bint explained) except *
