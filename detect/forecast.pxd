# The C side of forecast.py (docs/COMPILED.md): the per-update method; the typed fields and
# the fitting methods are the base class's (forecast_fit.pxd).
from libc.math cimport isfinite, sqrt

from .base cimport gap_decay, Point
from .forecast_fit cimport _SCHEDULE, ForecastFit

cdef double _REACH

cdef class ForecastDetector(ForecastFit):
    cpdef observe(self, object step, object loss, object lr=*)
    cdef inline int _observe(self, object step, object loss, object lr) except -1
    cdef int see(self, Point p) except -1
    # the steps of `observe`: C calls (inline: the compiler may fold them into observe),
    # each 0 or -1 with the exception set (a test of the value, no PyErr_Occurred())
    cdef inline double _advance(self, object step, long long st, object lr) except? -1.0
    cdef int _young(self, object step, long long st, double x0, double x1, object loss,
                    double x) except -1
    cdef inline int _judge(self, object step, long long st, double x0, double x1, double x,
                           double dt, double usual) except -1
    cdef inline int _learn_noise(self, object step, bint building, double r, double cap,
                                 double dt, double usual) except -1
    cdef inline int _keep(self, long long st, double x0, double x1, double x, double y) except -1
    cdef inline int _refit_due(self, object step, long long st, bint building,
                               bint alarm) except -1
    cdef inline int _publish(self, double pred, double sd, double rlo, double rhi, double sw,
                             double vpred, double mis2) except -1

cdef class FinetuningDetector(ForecastDetector):
    pass
