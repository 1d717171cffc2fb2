"""`early_rise`: the loss climbs several-fold above where the run started, early in the run.

A run that has not yet made progress has no progress to measure a run-away against
(`divergence` judges ``level - best`` against a tenth of ``start - best``, the effect gate
against its wobble), and a noisy fine-tune's early scatter is wide: a speech LoRA whose
train loss rose 2.8x during its lr warm-up paged nothing. What a person reads off such a
curve is the ratio: the loss now against the loss at the start.

``start`` is the median of the run's first ``start_points`` points (one noisy first
batch does not set it); active once the median of the last ``points`` points is at or
above ``ratio`` x ``start`` (a rise that holds, not one batch), critical; it resolves once
that median is below half-way back (``1 + (ratio - 1) / 2`` x ``start``). Only a loss that
starts above 0 is judged. Inert (an early return) after the first ``window``
points of the run, unless active, and once the run has made progress (that median at or
below ``start / ratio``): from there `divergence` has the run's progress to judge a
run-away against (a model kicked at step 300 of a tiny GPT, loss 3.7 -> 1 -> 10, is a
`divergence`, and a `Rewind` acts on it).

``ratio`` 2.5: over the 88 clean/unknown logs of ../shared/data and our own runs, the
largest value of the statistic (the median of ``points`` points in a row over ``start``,
in the first ``window`` points) is 1.203 (MLPerf RNN-T, dell; 1.11 the next source),
1.374 for the same log thinned to every 10th point: the rise above the start, 0.2 (0.37)
of it, is 7x (4x) under the bar's 1.5, the ratio 2.1x (1.8x) (docs/DETECTION.md). A ratio is invariant under a scale (x0.01, x100), not
under an offset: the same log +1000 rises by a ratio of ~1.002 and this rule is silent
(it can only miss, never page, there).

>>> det = EarlyRiseDetector()
>>> [det.update(s, x).active for s, x in enumerate([1.0, 1.1, 0.9, 2.6, 2.7, 2.8, 2.9], 1)]
[False, False, False, False, False, True, True]
>>> EarlyRiseDetector().update(1, 0.0).active      # a loss that starts at 0: never judged
False
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, register
from .finding import Verdict
from .recovery import HELD_KINDS

NO_STEP = cython.declare(cython.longlong, _NO_STEP)


class EarlyRiseState(NamedTuple):
    step: int
    active: bool
    start: float      # the run's starting loss (NaN until known)
    low: float        # the median of the last ``points`` losses


@cython.cclass
class EarlyRiseDetector(Detector):
    """``active``; ``start`` and ``low`` as in `EarlyRiseState`."""

    name = "early_rise"
    FEED, KIND = "level", "early_rise"
    # a late run-away of a run that never made progress pages `divergence` (or a drift
    # escalated to critical) first: the same incident, paged once
    GIVES_WAY = HELD_KINDS
    ARGS = ("ratio", "points", "start_points", "window")
    STATE = ("_last", "_n", "_head", "_recent", "_start", "_on", "_since", "_done")
    OPTIONAL = ("_last", "_start", "_since")

    def __init__(self, *, ratio: float = 2.5, points: int = 5, start_points: int = 3,
                 window: int = 1000) -> None:
        check(isinstance(ratio, (int, float)) and ratio > 1.0, "ratio", ratio, "a ratio > 1")
        for n, v in (("points", points), ("start_points", start_points), ("window", window)):
            check(isinstance(v, int) and v >= 1, n, v, "an int >= 1 (points)")
        self.ratio, self.points, self.start_points, self.window = ratio, points, start_points, window
        self._c_ratio = float(ratio)
        self._c_back = 1.0 + (float(ratio) - 1.0) / 2.0
        self._c_points, self._c_start_points, self._c_window = points, start_points, window
        self._last = NO_STEP
        self._n = 0
        self._head = []
        self._recent = []
        self._start = NAN
        self._on = False
        self._done = False       # progress made: inert from then
        self._since = NO_STEP
        self.active = False

    def see(self, p) -> None:
        self._observe(p.s, p.x)

    def asks(self) -> bool:
        return self._on

    def verdict(self) -> Verdict:
        """The loss holds several-fold above its start (critical)."""
        return Verdict("early_rise", self._on, "critical", self._low() - self._start,
                       NAN, None if self._since == NO_STEP else self._since,
                       {"start": self._start, "low": self._low()})

    def message(self, step: int, loss: float) -> str:
        return (f"loss {loss:.4g} rose to {self._low() / self._start:.3g}x its start "
                f"{self._start:.4g} (the median of its last {self._c_points} points) since step "
                f"{self._since}, early in the run: an lr warm-up peak too high, a wrong init or "
                "checkpoint?")

    def _low(self) -> float:
        """The median of the last ``points`` losses (NaN before any)."""
        r = sorted(self._recent)
        n = len(r)
        if not n:
            return NAN
        return r[n // 2] if n % 2 else 0.5 * (r[n // 2 - 1] + r[n // 2])

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    @cython.locals(mid=cython.double)
    def _observe(self, step: int, loss: float) -> int:
        if step <= self._last:
            return 0
        if (self._done or self._n >= self._c_window) and not self._on:
            return 0                     # inert past the run's early window, or its progress
        self._last = step
        self._n += 1
        if self._n <= self._c_start_points:
            self._head.append(loss)
            if self._n == self._c_start_points:
                h = sorted(self._head)
                n = len(h)
                self._start = h[n // 2] if n % 2 else 0.5 * (h[n // 2 - 1] + h[n // 2])
        self._recent.append(loss)
        if len(self._recent) > self._c_points:
            del self._recent[0]
        if not (self._start > 0.0) or len(self._recent) < self._c_points:
            return 0
        mid = self._low()
        if not self._on and mid * self._c_ratio <= self._start:
            self._done = True
        elif not self._on and mid >= self._c_ratio * self._start:
            self._on, self._since = True, step
        elif self._on and mid < self._c_back * self._start:
            self._on, self._since = False, NO_STEP
        self.active = self._on
        return 0

    def update(self, step: int, loss: float) -> EarlyRiseState:
        self.observe(step, loss)
        return EarlyRiseState(step, self._on, self._start, self._low())


register(EarlyRiseDetector)
