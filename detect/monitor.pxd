# The C side of monitor.py (docs/COMPILED.md): its own methods and the C API it builds a
# MonitorState with; the typed fields and references to the detectors are the base
# class's (arbiter.pxd).
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM

cdef extern from "Python.h":
    object PyType_GenericAlloc(type t, Py_ssize_t nitems)   # Cython's own takes an object

from .arbiter cimport _NF, _RJ, Arbiter
from .rewind cimport RewindPoints

cdef long long NO_STEP

cdef object _state(tuple fields)

cdef class RunMonitor(Arbiter):
    cdef void _setup(self, dict d) except *
    cdef object _rewind(self, long long step)
