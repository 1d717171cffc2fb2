# The C side of resolution.py (docs/COMPILED.md): frozen_loader and plateau ask it per point.
from libc.math cimport isfinite, rint

cdef long long _RAW
cdef double _EXACT

cpdef long long decimals(long long d, double x)
cdef bint _fits(double x, long long k)
cpdef double quantum(long long d)
