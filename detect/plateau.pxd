# The C side of plateau.py (docs/COMPILED.md): the per-update method; the typed fields and
# the slope's methods are the base class's (plateau_slope.pxd).
from libc.math cimport exp, isfinite, log

from .base cimport Point, decay
from .resolution cimport decimals, quantum
from .plateau_slope cimport PlateauSlope

cdef long long RAW


cdef class PlateauDetector(PlateauSlope):
    cpdef bint observe(self, long long step, double loss, object l_pred=*, bint deviating=*) except -1
    cdef inline bint _observe(self, long long step, double loss, object l_pred,
                              bint deviating) except -1
    cdef int see(self, Point p) except -1
    cdef bint _benign_repeats(self, double loss) except -1
