"""`nonfinite`: a NaN or infinite loss, flagged at once (critical).

>>> det = NonfiniteDetector()
>>> [det.update(t, v).active for t, v in enumerate([2.0, 1.9, float("nan"), 1.8])]
[False, False, True, False]
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .base import Detector, register


class NonfiniteState(NamedTuple):
    step: int
    active: bool
    count: int          # non-finite losses seen so far
    first_step: int | None


@register
class NonfiniteDetector(Detector):
    name = "nonfinite"

    def __init__(self) -> None:
        self._count = 0
        self._first = None

    def update(self, step: int, loss: float) -> NonfiniteState:
        bad = not math.isfinite(loss)
        if bad:
            self._count += 1
            if self._first is None:
                self._first = step
        return NonfiniteState(step, bad, self._count, self._first)
