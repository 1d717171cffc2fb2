# The C side of rewind.py (docs/COMPILED.md): the monitor reads ``next_at`` on every update.

cdef class RewindPoints:
    cdef list _points
    cdef public double next_at
