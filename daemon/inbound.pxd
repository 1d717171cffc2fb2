# The compiled build's declarations for inbound.py (docs/COMPILED.md): the limiter's rates
# and shared bucket as C doubles, its per-frame methods called in C.

cdef class PeerBuckets:
    cdef public double rate, burst, total_rate, _total_tokens, _total_when, _light_tokens, _light_when
    cdef public Py_ssize_t max_peers
    cdef public object clock
    cdef public dict _peers
    cdef public long long dropped_frames, dropped_bytes

    cpdef bint take(self, object peer, Py_ssize_t size, bint backlogged=*)
    cpdef charge(self, object peer, double seconds, double shared=*)
    cpdef double wait_s(self, object peer)
    cpdef bint contending(self, object peer)
    cdef _charge_shared(self, object peer, double seconds)
    cdef double _refill_light(self, double now)
    cdef tuple _new(self, double total, double now)
    cdef double _refill_total(self, double now)
    cdef bint _others_active(self, object peer, double now)
