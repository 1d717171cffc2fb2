# The compiled build's declarations for frame_keys.py (docs/COMPILED.md, emitters/build.py):
# the key bits as C constants and the name-to-bit compare in C, cimported by fast_decode.
cdef unsigned int V, TYPE, RUN, SEQ, STEP, LOSS, LR, GRAD_NORM, TOKENS, RANK, TS, EMITTER, AUTH
cdef unsigned int EVENTS, BASE

cpdef unsigned int key_bit(Py_ssize_t n, unsigned long long w, unsigned int ninth) noexcept
