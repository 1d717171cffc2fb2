# The compiled build's declarations for fast_checks.py (docs/COMPILED.md, emitters/build.py):
# a loss event's checks with the event a dict (its ``get`` and ``len`` in C) and its
# type tests as pointer compares. Compiled for the daemon only; a trainer's install is pure.

cpdef bint plain_loss(dict ev)
