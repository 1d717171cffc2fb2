"""`nonfinite`: a NaN or infinite loss, flagged at once (critical).

>>> det = NonfiniteDetector()
>>> [det.update(t, v).active for t, v in enumerate([2.0, 1.9, float("nan"), 1.8])]
[False, False, True, False]
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (detect/_cython_shim.py)
    from . import _cython_shim as cython
if not cython.compiled:        # compiled: libc's (nonfinite.pxd)
    from math import isfinite

from .base import NO_STEP as _NO_STEP, Detector, register

NO_STEP = cython.declare(cython.longlong, _NO_STEP)

_new = tuple.__new__     # a NonfiniteState without the NamedTuple's Python-level __new__


class NonfiniteState(NamedTuple):
    step: int
    active: bool
    count: int          # non-finite losses seen so far
    first_step: int | None


@cython.cclass
class NonfiniteDetector(Detector):
    """``observe`` leaves ``active`` (this loss is not finite), ``count`` and ``first_step``."""

    name = "nonfinite"
    ARGS = ()
    STATE = ("_count", "_first")
    OPTIONAL = ("_first",)

    def __init__(self) -> None:
        self._count = 0
        self._first = NO_STEP
        self.active = False

    def observe(self, step: int, loss: float) -> None:
        bad = not isfinite(loss)
        if bad:
            self._count += 1
            if self._first == NO_STEP:
                self._first = step
        self.active = bad

    @property
    def count(self) -> int:
        return self._count

    @property
    def first_step(self) -> int | None:
        return None if self._first == NO_STEP else self._first

    def update(self, step: int, loss: float) -> NonfiniteState:
        self.observe(step, loss)
        return _new(NonfiniteState, (step, self.active, self._count, self.first_step))


register(NonfiniteDetector)
