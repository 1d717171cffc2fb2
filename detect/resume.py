"""`resume_jump`: the step went backwards (a resume or restart), and the loss with it.

Active for the one update at which the step goes back. Severity ``info`` when the loss
continues where the run was at that step, ``warning`` when it jumped by more than
``z`` noise units (``scale``: EWMA of absolute one-step changes, half-life
``scale_halflife`` steps) above the last loss seen before the resume. In `RunMonitor` the
detectors are first rewound to where they stood before the resumed step (`rewind`), so
that loss is the one the run had there, not the one at the step it went back from.

>>> det = ResumeDetector()
>>> states = [det.update(t, 2.0 + 0.01 * (t % 2)) for t in range(1, 100)] + [det.update(50, 2.6)]
>>> states[-1].active, states[-1].severity
(True, 'warning')
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .base import Detector, gap_decay, positive, register


class ResumeState(NamedTuple):
    step: int
    active: bool
    severity: str | None
    from_step: int | None = None
    jump: float = 0.0


@register
class ResumeDetector(Detector):
    name = "resume_jump"

    def __init__(self, *, z: float = 6.0, scale_halflife: float = 200.0) -> None:
        positive("z", z)
        positive("scale_halflife", scale_halflife)
        self.z, self.scale_halflife = z, scale_halflife
        self._c_scale = 0.5 ** (1.0 / scale_halflife)    # per-step EWMA weight (a constant)
        self._last_step = None
        self._last_loss = None
        self._scale = 0.0
        self._dt = 1.0             # EWMA of the gap between points (steps)

    @property
    def last_step(self) -> int | None:
        """The latest step seen (None before the first)."""
        return self._last_step

    def update(self, step: int, loss: float) -> ResumeState:
        prev_step, prev = self._last_step, self._last_loss
        if prev_step is not None and step < prev_step:
            return self.resumed(step, loss, prev_step)
        self._last_step = step
        if math.isfinite(loss):
            if prev is not None:
                dt = step - prev_step
                usual = self._dt
                self._dt += 0.05 * (dt - usual)
                g = self._c_scale if dt <= 1 else gap_decay(dt, usual, self.scale_halflife)
                d = abs(loss - prev)
                scale = self._scale
                cap = 4 * scale if scale > 0 else d
                self._scale = g * scale + (1 - g) * (d if d < cap else cap)
            self._last_loss = loss
        return ResumeState(step, False, None)

    def resumed(self, step: int, loss: float, from_step: int) -> ResumeState:
        """The step went back from ``from_step`` to ``step``: judge the loss's jump against
        the last loss this detector saw (the monitor first rewinds it to a point before
        ``step``, so that is the loss the run had there, not at ``from_step``)."""
        prev = self._last_loss
        self._last_step = step
        finite = math.isfinite(loss)
        jump = loss - prev if (finite and prev is not None) else 0.0
        big = jump > self.z * max(self._scale, 1e-12) and self._scale > 0
        if finite:
            self._last_loss = loss
        return ResumeState(step, True, "warning" if big else "info", from_step, jump)
