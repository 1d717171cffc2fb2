"""`ReferenceVerdict`: what `reference.ReferenceTracker` says at one update, and the
``behind`` finding it makes."""

from __future__ import annotations

import dataclasses

from .finding import Finding


def plain(v):
    """A snapshot's value: NaN as None."""
    return None if isinstance(v, float) and v != v else v


@dataclasses.dataclass(frozen=True)
class ReferenceVerdict:
    """The comparison at one update. ``gap``/``units`` are against ``reference`` (the one
    the live run is furthest behind when several); NaN when there is no comparison."""

    state: str
    reference: str
    gap: float
    units: float
    message: str
    step: int = 0
    resolved: bool = False     # True on the update where a ``behind`` ended

    def finding(self) -> Finding | None:
        """A ``behind`` finding (active while behind, inactive on the update it resolves),
        else None."""
        if self.state == "behind":
            return Finding("behind", "warning", True, self.step, self.message)
        if self.resolved:
            return Finding("behind", "warning", False, self.step, self.message)
        return None
