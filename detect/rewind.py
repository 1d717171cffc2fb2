"""Rewind points: where a run's detectors stood at a few recent steps, for resumes.

A run resumed from a checkpoint sends again steps its detectors have already seen, and
their state has moved past them: the forecast's learning-rate sums (S1, S2, the
multi-power buckets) and its bins, the levels and bests of `rise`, `spike` and
`divergence`, the slope ring of `plateau`. Carried into the steps trained again, that state
makes a healthy resume look like a failure: a level above its best, a loss above a
forecast that has run ahead in learning-rate area, a "spike" that does not recover.

So `RunMonitor` keeps its detectors' snapshots, msgpack-packed, at steps spaced by
``RATIO`` x step (at least ``MIN_GAP`` steps apart), the ``KEEP`` newest, and on a
resume to step ``s`` restores the newest one taken before ``s``: the detectors continue
as if the run had never gone past it, with a gap up to ``s``. Memory is bounded
(``KEEP`` x 4-8 KB a run); the points cover back to about 0.4x the current step. They
are not persisted: after a daemon restart a resume finds none and the detectors start
over (warm-ups included), which costs sensitivity for a while, never a false page.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

import msgpack

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

KEEP = 6          # points kept
RATIO = 1 / 6     # spacing: this fraction of the step ...
MIN_GAP = 200     # ... and at least this many steps


@cython.cclass
class RewindPoints:
    """The ``KEEP`` newest detector snapshots, oldest first. ``next_at`` is the step at or
    after which the caller should `take` the next one (a C double in the compiled build,
    rewind.pxd: one comparison per update on the hot path)."""

    def __init__(self) -> None:
        self._points = []     # [(step, msgpack of the snapshots)]
        self.next_at = MIN_GAP

    def __len__(self) -> int:
        return len(self._points)

    def take(self, step: int, detectors: dict[str, Any]) -> None:
        """Keep the detectors' state as of ``step`` (after its update)."""
        snap = {k: det.snapshot(copy=False) for k, det in detectors.items()}
        self._points.append((step, msgpack.packb(snap, use_bin_type=True)))
        if len(self._points) > KEEP:
            del self._points[0]
        self.next_at = step + max(MIN_GAP, RATIO * step)

    def before(self, step: int) -> tuple[int, dict[str, Any]] | None:
        """``(step', snapshots)`` of the newest point taken before ``step``, or None.

        Points at or after ``step`` are dropped: they describe a future the run left."""
        pts = self._points
        while pts and pts[-1][0] >= step:
            pts.pop()
        if not pts:
            self.next_at = step + MIN_GAP
            return None
        at, blob = pts[-1]
        self.next_at = at + max(MIN_GAP, RATIO * at)
        return at, msgpack.unpackb(blob, raw=False, strict_map_key=False)
