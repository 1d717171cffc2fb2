# The C side of arbiter.py (docs/COMPILED.md): the bookkeeping's typed fields, typed
# references to the detectors whose verdicts the named rules read, and its methods.
from .divergence cimport DivergenceDetector
from .effect cimport EffectDetector
from .forecast cimport ForecastDetector
from .gradnorm cimport GradNormDetector
from .memory cimport MemoryDetector
from .throughput cimport ThroughputDetector
from .nonfinite cimport NonfiniteDetector
from .overfit cimport OverfitDetector
from .plateau cimport PlateauDetector
from .resume cimport ResumeDetector
from .rise cimport RiseDetector
from .spike cimport SpikeDetector

cdef double _NAN
cdef int UNNAMED, AS_PLATEAU, AS_DRIFT

cdef class Episode:
    cdef public int slowdown_as
    cdef public double shift_from
    cdef public bint fc_drift

cdef class Arbiter:
    cdef public dict emitted, held, peak_scores, since
    cdef public list out
    cdef readonly object rec
    cdef public bint alert
    cdef public int ever
    cdef readonly Episode episode
    # this update's conclusions, from one rule to the next (`rules`)
    cdef public bint rising, explained, dv_page, drift, pl_up, handover, slowdown, stagnation
    cdef public object rewound_to
    cdef readonly tuple own, own_kinds, own_gives_way, incidents, absorbing
    cdef readonly int absorbing_bits
    cdef readonly ResumeDetector rj
    cdef readonly NonfiniteDetector nf
    cdef readonly GradNormDetector gn
    cdef readonly SpikeDetector sp
    cdef readonly DivergenceDetector dv
    cdef readonly RiseDetector ri
    cdef readonly ForecastDetector fc      # or its subclass FinetuningDetector
    cdef readonly PlateauDetector pl
    cdef readonly EffectDetector ef
    cdef readonly OverfitDetector ov
    cdef readonly ThroughputDetector tp
    cdef readonly MemoryDetector mem

    cdef void attach(self, dict d) except *
    cdef bint due(self, str kind, bint active, str severity) except -1
    cdef void push(self, str kind, bint active, str severity, object step, str text,
                   str details=*) except *
    cdef object onset(self, str kind, object step)
    cdef bint paging(self, tuple kinds, bint critical=*) except -1
    cdef void escalate(self, object step) except *
    cdef bint big(self, str kind, double effect) except -1
    cdef bint stalled(self, PlateauDetector pl, bint risen=*) except -1
    cdef str size(self, double effect)
    cdef double rise(self, object l_pred) except? -1.0
    cdef double drift_effect(self) except? -1.0
