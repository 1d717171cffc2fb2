"""Resolved means recovered: the band a page of the loss level left, and whether it is back.

When a ``drift``, ``spike`` or ``divergence`` pages (warning or critical), `RunMonitor`
records the run's pre-incident band from its `effect` detector: the best level so far
and, above it, ``gate`` units (``max(rho * progress, wobble)``, the deviation that may
page). The page then resolves only once its detector is quiet *and* the fast level (a
fifth of the level's half-life) is back within that band. A detector that adapts to a
broken level (a spike's scale widening with the new noise, the forecast refitted
through it) or that gives way to another kind (a drift while a spike pages) no longer
resolves a page while the loss sits at chance: on a synthetic run at chance from step
1500, the drift and spike warnings resolved at steps 1610 and 1760 before this.

A page of a kind that stays above its band for ``ESCALATE_AFTER`` times the level's
time scale (its half-life in steps, ``tau``: 100 steps at a point per step) becomes
critical, unless the run already pages a critical: the message says for how long.

Plain values, no I/O: `RunMonitor` snapshots it with its detectors.
"""

from __future__ import annotations

HELD_KINDS = ("drift", "spike", "divergence")   # the pages of a loss level above its best
ESCALATE_AFTER = 5.0     # x tau: a page not recovered for this long becomes critical


class Recovery:
    """Per held kind: ``[step it paged, best level then, top of the band]``."""

    def __init__(self) -> None:
        self.held: dict[str, list] = {}

    def paged(self, kind: str, step: int, ef) -> None:
        """``kind`` paged at ``step``: remember the band the run left (once per episode)."""
        if kind in HELD_KINDS and kind not in self.held:
            best, unit = min(ef.best, ef.level), ef.unit
            if unit < float("inf"):
                self.held[kind] = [int(step), best, best + ef.gate * unit]

    def recovered(self, kind: str, ef) -> bool:
        """Is the fast level back within the band ``kind`` left (True when not held)?"""
        h = self.held.get(kind)
        return h is None or ef._fast <= h[2]

    def overdue(self, step: int, ef) -> list:
        """The held kinds above their band for longer than ``ESCALATE_AFTER`` x tau."""
        tau = max(ef.halflife, ef.min_points * ef._dt)
        return [k for k, h in self.held.items()
                if step - h[0] >= ESCALATE_AFTER * tau and ef._fast > h[2]]

    def message(self, kind: str, step: int, ef) -> str:
        since, best, top = self.held[kind]
        return (f"{kind} not recovered for {step - since:,} steps (paged at step {since}): "
                f"loss level {ef._fast:.4g} against {best:.4g} before it (band up to {top:.4g})")
