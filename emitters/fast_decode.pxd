# The compiled build's declarations for fast_decode.py (docs/COMPILED.md, emitters/build.py):
# the frame read through a C pointer, its integers and floats as C values, the key bits
# and bounds as C constants. Compiled for the daemon only; a trainer's install is pure.
cimport cython
from libc.string cimport memcmp, memcpy

from .frame_keys cimport key_bit

cdef unsigned long long I64_MAX, V1
cdef Py_ssize_t RUN_MAX, EMITTER_MAX, AUTH_MAX, BATCH_MAX
cdef unsigned int V, TYPE, RUN, SEQ, STEP, LOSS, LR, GRAD_NORM, TOKENS, RANK, TS, EMITTER, AUTH
cdef unsigned int EVENTS, BASE, REQUIRED, EVENT_KEYS, BATCH_REQUIRED, BATCH_KEYS
cdef Py_ssize_t FEWEST_KEYS, MOST_KEYS
cdef int INT, NEG, FLOAT, STR, KIND_LOSS, KIND_BATCH


cdef class _Frame:
    cdef bytes frame
    cdef const unsigned char* buf
    cdef Py_ssize_t pos, end, at, size
    cdef unsigned long long u, seq, step, base
    cdef double d
    cdef object neg, loss, lr, grad_norm, tokens, ts, em, auth
    cdef int kind
    cdef unsigned int mask
    cdef Py_ssize_t run_at, run_size, em_at, em_size, auth_at, auth_size

    cdef void start(self, bytes frame)
    @cython.locals(v=cython.ulonglong, i=Py_ssize_t)
    cdef unsigned long long be(self, Py_ssize_t p, Py_ssize_t n) noexcept
    @cython.locals(p=Py_ssize_t, b=cython.uint, w=Py_ssize_t)
    cdef Py_ssize_t header(self, unsigned int fix, unsigned int fix_mask, unsigned int first) noexcept
    @cython.locals(p=Py_ssize_t, end=Py_ssize_t, b=cython.int, w=Py_ssize_t, n=Py_ssize_t)
    cdef int scalar(self) except -1
    @cython.locals(bits=cython.ulonglong, bits32=cython.uint, d=cython.double, f=cython.float)
    cdef double real(self, Py_ssize_t p, bint wide) noexcept
    @cython.locals(n=Py_ssize_t, p=Py_ssize_t, w=cython.ulonglong)
    cdef unsigned int key(self) except? 0
    @cython.locals(kind=cython.int, num=object)
    cdef bint value(self, unsigned int k) except -1
    @cython.locals(count=Py_ssize_t, mask=cython.uint, k=cython.uint)
    cdef bint event(self) except -1
    @cython.locals(same=bint)
    cdef bint same(self, Py_ssize_t a, Py_ssize_t b, Py_ssize_t n) noexcept
    cdef bint named(self, unsigned int mask, Py_ssize_t em_at, Py_ssize_t em_size, Py_ssize_t auth_at,
                    Py_ssize_t auth_size) except -1
    @cython.locals(s=unicode, n=Py_ssize_t)
    cdef object text(self, Py_ssize_t at, Py_ssize_t size, Py_ssize_t shortest, Py_ssize_t longest)


@cython.locals(r=_Frame, count=Py_ssize_t, mask=cython.uint, kind=cython.int, ev_mask=cython.uint,
               k=cython.uint, em_at=Py_ssize_t, em_size=Py_ssize_t, auth_at=Py_ssize_t,
               auth_size=Py_ssize_t, run_at=Py_ssize_t, run_size=Py_ssize_t, ev_em_at=Py_ssize_t,
               ev_em_size=Py_ssize_t, ev_auth_at=Py_ssize_t, ev_auth_size=Py_ssize_t)
cpdef object loss_frame(object frame, object no_lr)

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, mask=cython.uint, run_at=Py_ssize_t, run_size=Py_ssize_t,
               em_at=Py_ssize_t, em_size=Py_ssize_t, auth_at=Py_ssize_t, auth_size=Py_ssize_t,
               has_lr=cython.uint, has_gn=cython.uint, has_tokens=cython.uint,
               has_ts=cython.uint, items=list)
cdef object _events(_Frame r, object no_lr)
