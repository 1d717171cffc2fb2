# The C side of forecast.py (docs/COMPILED.md): the per-update method; the typed fields and
# the fitting methods are the base class's (forecast_fit.pxd).
from libc.math cimport isfinite, sqrt

from .base cimport gap_decay, Point
from .forecast_fit cimport ForecastFit

cdef double _REACH

cdef class ForecastDetector(ForecastFit):
    cpdef observe(self, object step, object loss, object lr=*)
    cpdef void see(self, Point p) except *


cdef class FinetuningDetector(ForecastDetector):
    pass
