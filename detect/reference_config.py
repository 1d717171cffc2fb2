"""`ReferenceConfig`: how far behind its references, for how long, a run pages
(`reference.ReferenceTracker`; the values' evidence: docs/REFERENCES.md, "The detector")."""

from __future__ import annotations

import dataclasses

from .errors import check


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReferenceConfig:
    """How far behind, for how long, pages (docs/REFERENCES.md, "The detector")."""

    gate: float = 0.02         # a material gap: this fraction of the reference's progress by then
    noise_gate: float = 4.0    # ... and this many of the pair's level noise
    halflife: float = 50.0     # steps: the levels compared are EWMAs with this half-life
    lag: float = 0.4           # ... and more than the reference fell in the last ``lag`` of its steps
    warm: float = 0.05         # not judged before this fraction of the reference's steps
    persist: float = 0.02      # the gap must hold over this fraction of the steps so far ...
    min_points: int = 3        # ... and this many updates (and the lr this many to differ)
    lr_tol: float = 0.1        # |lr - lr_ref| / lr_ref above this: a different schedule
    lr_far: float = 1.25       # another lr: behind by this fraction of the reference's progress ...
    lr_lag: float = 0.75       # ... and more than it fell in the last ``lr_lag`` of its steps
    lr_stuck: float = 0.25     # ... or behind by this fraction, and stuck: its own level fell
    stuck_keep: float = 0.1    # ... less than this x the gap over the last half of its steps,
    stuck_warm: float = 0.2    # ... judged from this fraction of the reference's steps
    start_points: int = 10     # the reference's start: its highest loss among these first points

    def __post_init__(self) -> None:
        num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)   # noqa: E731
        for n in ("gate", "noise_gate", "halflife", "lr_tol", "lr_far", "lr_stuck"):
            check(num(getattr(self, n)) and getattr(self, n) > 0, n, getattr(self, n), "a number > 0")
        for n in ("warm", "persist", "lag", "lr_lag", "stuck_keep", "stuck_warm"):
            check(num(getattr(self, n)) and 0 <= getattr(self, n) < 1, n, getattr(self, n),
                  "a fraction in [0, 1)")
        for n in ("min_points", "start_points"):
            v = getattr(self, n)
            check(isinstance(v, int) and not isinstance(v, bool) and v >= 1, n, v, "an int >= 1")
