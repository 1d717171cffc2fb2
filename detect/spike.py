"""`spike`: a jump of the loss far above its recent level, judged by whether it recovers.

The robust z of the change is ``(loss - level) / scale``: ``level`` an EWMA of the loss
(half-life ``level_halflife`` steps) and ``scale`` an EWMA of absolute one-step changes
(half-life ``scale_halflife`` steps); the level is fed only with non-spike points, the
scale with every point, winsorized at 4 scales (fed only with the quiet ones, a
heavy-tailed mini-batch loss collapsed it: every other batch became a "spike"). A jump with
z >= ``z`` opens a spike. If the loss is back under ``level + recover_z * scale`` within
``recover`` steps the spike was a benign one-batch outlier: state ``severity="info"``.
Otherwise it is a sustained spike (``severity="warning"``, active until it recovers).
Every half-life spans at least ``min_points`` of the stream's usual gaps: in a log with
a point every 500 steps, a 200-step half-life would make the scale one point's change,
and every ordinary point after a quiet one a "spike". ``height`` in the state is the
highest jump above the level since the spike opened.

>>> import random
>>> rng = random.Random(3)
>>> det = SpikeDetector()
>>> out = []
>>> for t in range(1, 801):
...     loss = 3.0 + rng.gauss(0, 0.05) + (1.5 if t == 300 else 0.0) + (1.0 if t >= 600 else 0.0)
...     s = det.update(t, loss)
...     if s.severity and (not out or out[-1][1] != s.severity):
...         out.append((t, s.severity))
>>> out
[(301, 'info'), (610, 'warning')]
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .base import Detector, check, gap_decay, positive, register


class SpikeState(NamedTuple):
    step: int
    z: float
    active: bool                 # a sustained spike is going on
    severity: str | None         # "info" (recovered outlier), "warning" (sustained), None
    spike_step: int | None = None
    height: float = 0.0          # loss minus the pre-spike level, at this update


@register
class SpikeDetector(Detector):
    name = "spike"

    def __init__(self, *, z: float = 8.0, recover: int = 10, recover_z: float = 3.0,
                 level_halflife: float = 10.0, scale_halflife: float = 200.0,
                 warmup: int = 50, min_points: int = 20) -> None:
        for n in ("z", "recover_z", "level_halflife", "scale_halflife"):
            positive(n, locals()[n])
        check(isinstance(recover, int) and recover >= 1, "recover", recover, "an int >= 1 (steps)")
        check(isinstance(warmup, int) and warmup >= 0, "warmup", warmup, "an int >= 0 (steps)")
        check(isinstance(min_points, int) and min_points >= 1, "min_points", min_points, "an int >= 1")
        self.min_points = min_points
        self.z, self.recover, self.recover_z = z, recover, recover_z
        self.level_halflife, self.scale_halflife, self.warmup = level_halflife, scale_halflife, warmup
        self._c_level = 0.5 ** (1.0 / level_halflife)   # per-step EWMA weights (constants)
        self._c_scale = 0.5 ** (1.0 / scale_halflife)
        self._level = None
        self._scale = 0.0
        self._last = None
        self._first = None
        self._open = None        # step of the open spike
        self._height = 0.0
        self._later = 0          # points seen since it opened
        self._sustained = False
        self._dt = 1.0           # EWMA of the gap between points (steps)
        self._n = 0              # points seen (the warm-up also needs 10)

    def update(self, step: int, loss: float) -> SpikeState:
        if not math.isfinite(loss):
            return SpikeState(step, 0.0, self._sustained, "warning" if self._sustained else None)
        if self._level is None:
            self._level, self._last, self._first = loss, step, step
            return SpikeState(step, 0.0, False, None)
        dt = max(step - self._last, 1)
        self._last = step
        usual = self._dt
        self._dt += 0.05 * (dt - usual)
        sc = max(self._scale, 1e-12)
        z = (loss - self._level) / sc
        if self._open is not None:
            return self._follow(step, loss, z)
        self._n += 1
        if z >= self.z and step - self._first >= self.warmup and self._scale > 0 and self._n >= 10:
            self._open, self._height, self._later = step, loss - self._level, 0
            return SpikeState(step, z, False, None, step, self._height)
        self._learn(loss, dt, usual)
        return SpikeState(step, z, False, None)

    def _follow(self, step: int, loss: float, z: float) -> SpikeState:
        self._later += 1
        self._learn(loss, 1.0, 1.0, level=False)   # the scale keeps learning, winsorized
        since = self._open
        if loss - self._level > self._height:
            self._height = loss - self._level
        height = self._height
        if z < self.recover_z:
            sustained = self._sustained
            self._open, self._later, self._sustained = None, 0, False
            self._learn(loss, 1.0, 1.0)
            if not sustained and step - since <= self.recover:
                return SpikeState(step, z, False, "info", since, height)
            return SpikeState(step, z, False, None, since, height)
        if step - since >= self.recover and self._later >= 2:
            self._sustained = True
        if self._sustained:
            return SpikeState(step, z, True, "warning", since, height)
        return SpikeState(step, z, False, None, since, height)

    def _learn(self, loss: float, dt: float, usual: float, level: bool = True) -> None:
        d = abs(loss - self._level)
        if self._scale == 0.0:
            self._scale = d
        few = self.min_points * self._dt            # a half-life spans at least min_points
        g = (self._c_scale if dt == 1 and few <= self.scale_halflife
             else gap_decay(dt, usual, max(self.scale_halflife, few)))
        cap = 4 * self._scale + 1e-12
        self._scale = g * self._scale + (1 - g) * (d if d < cap else cap)
        if not level:
            return
        g = (self._c_level if dt == 1 and few <= 4 * self.level_halflife
             else gap_decay(dt, usual, max(self.level_halflife, 0.25 * few)))
        self._level = g * self._level + (1 - g) * loss
