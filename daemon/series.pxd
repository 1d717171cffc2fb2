# The compiled build's declarations for series.py (Cython pure-Python mode, docs/COMPILED.md):
# the newest points of a series staged as C doubles in a fixed block (``_buf``), not as
# tuples turned into an array 64 at a time.

cdef class Decimated:
    cdef public object fields, recent, past, per_decade, history, last_step
    cdef public object _mean, _ring, _head, _n, _last, _sum, _cnt, _bin, _np, _shift, _stage
    cdef object _bufarr
    cdef double[:, ::1] _buf
    cdef Py_ssize_t _nbuf, _k

    cpdef push(self, tuple row)


cdef class Spark:
    cdef public object size, stride, _pts, _last
    cdef public bint _open
    cdef public double _sum
    cdef public Py_ssize_t _nf, _n


cdef class RunSeries:
    cdef public object envelopes, markers, timing, _timing_args
    cdef public Decimated train, eval
