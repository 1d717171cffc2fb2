"""Resolved means recovered: the band a page of the loss level left, and whether it is back.

When a ``drift``, ``spike`` or ``divergence`` pages (warning or critical), `RunMonitor`
records the run's pre-incident band from its `effect` detector: the best level so far
and, above it, ``gate`` units (``max(rho * progress, wobble)``: the deviation that may
page). The page then resolves only once its detector is quiet *and* the loss is back
within that band: the median of its last ``POINTS`` points, kept while a page is held
(a median, because the levels that page are winsorized upward and climb slowly after a
jump, and one low point is no recovery). A detector that adapts to a broken level (a
spike's scale widening with the new noise, a forecast refitted through it) or that gives
way to another kind (a drift while a spike pages) no longer resolves a page while the
loss sits at chance: on a synthetic run at chance from step 1500, the drift and spike
warnings resolved at steps 1610 and 1760 before this.

A page that stays above its band for ``ESCALATE_AFTER`` times the level's time scale
(the effect level's half-life in steps, ``tau``: 100 steps at a point a step), by at
least ``CRITICAL_OF_PROGRESS`` of the run's progress (the bar of a critical divergence,
`arbiter.DIVERGENCE_OF_PROGRESS`: a slow drift of 2% stays a warning, a loss back at
chance is 100%), becomes critical, unless the run already pages a critical; the message
says for how long. One that gave back ``LOST_OF_PROGRESS`` of the run's progress (the median
of its last ``POINTS`` points) is critical at once: an MLP whose lr jumped from 0.01 to 0.7
held its loss at 1.25-1.7 (from 0.08, of a 2.3 start) as a spike warning for 500 steps.
On the clean logs no verdict of the loss level is ever active that far up (at most 0.8%
of the progress): 30x under this bar.

Plain values, no I/O, no clock; the cost is paid only while a page is held.
"""

from __future__ import annotations

from . import messages

HELD_KINDS = ("drift", "spike", "divergence")   # the pages of a loss level above its best
ESCALATE_AFTER = 5.0     # x tau: a page not recovered for this long becomes critical,
CRITICAL_OF_PROGRESS = 0.1   # when this far above its best level, as a share of progress
POINTS = 16              # the recent losses whose median says where the loss is
LOST_OF_PROGRESS = 0.25  # a held page this far above its best, as a share of progress: critical now


class Recovery:
    """``held``: per held kind, ``[step it paged, best level then, top of the band]``;
    ``recent``: the last ``POINTS`` losses since a page was first held."""

    def __init__(self) -> None:
        self.held: dict[str, list] = {}
        self.recent: list[float] = []

    def paged(self, kind: str, step: int, ef) -> None:
        """``kind`` paged at ``step``: remember the band the run left (once per episode)."""
        if kind in HELD_KINDS and kind not in self.held:
            best, unit = min(ef.best, ef.level), ef.unit
            if unit < float("inf"):
                self.held[kind] = [int(step), best, best + ef.gate * unit]

    def observe(self, loss: float) -> None:
        """One loss while a page is held."""
        self.recent.append(loss)
        if len(self.recent) > POINTS:
            del self.recent[0]

    def level(self) -> float:
        """The median of the recent losses (inf before the first)."""
        r = sorted(self.recent)
        n = len(r)
        if not n:
            return float("inf")
        return r[n // 2] if n % 2 else 0.5 * (r[n // 2 - 1] + r[n // 2])

    def recovered(self, kind: str) -> bool:
        """Is the loss back within the band ``kind`` left (True when it is not held)?"""
        h = self.held.get(kind)
        return h is None or self.level() <= h[2]

    def release(self, kind: str) -> None:
        """``kind`` resolved: forget its band (and the recent losses, with the last one)."""
        del self.held[kind]
        if not self.held:
            self.recent.clear()

    def overdue(self, step: int, ef) -> list:
        """The held kinds above their band for longer than ``ESCALATE_AFTER`` x tau, or
        for ``POINTS`` points at ``LOST_OF_PROGRESS`` of the progress above their best."""
        tau = max(ef.halflife, ef.min_points * ef.spacing)
        bar = CRITICAL_OF_PROGRESS * ef.progress
        lost = len(self.recent) >= POINTS and ef.progress > 0
        return [k for k, h in self.held.items()
                if not self.recovered(k) and (
                    (step - h[0] >= ESCALATE_AFTER * tau and self.level() - h[1] >= bar)
                    or (lost and self.level() - h[1] >= LOST_OF_PROGRESS * ef.progress))]

    def message(self, kind: str, step: int, progress: float) -> tuple:
        """The page of an escalation, as (headline, details) (`messages`)."""
        since, best, top = self.held[kind]
        level = self.level()
        return (f"{kind} not recovered for {step - since:,} steps since its page at step "
                f"{since}: loss {level:.4g} stands {messages.size(level - best, progress)} "
                f"above its level {best:.4g} before it",
                f"loss the median of its last {len(self.recent)} points; the band it left "
                f"went up to {top:.6g}")

    def snapshot(self) -> dict:
        return {"held": {k: list(v) for k, v in self.held.items()}, "recent": list(self.recent)}

    def restore(self, snap: dict) -> None:
        self.held.clear()          # in place: the monitor holds a typed reference to it
        self.held.update({k: list(v) for k, v in snap.get("held", {}).items()})
        self.recent = [float(x) for x in snap.get("recent", [])]
