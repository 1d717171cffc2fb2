"""Values the detectors hand to the run state: findings and the monitor state."""

from __future__ import annotations

from typing import NamedTuple


class Finding(NamedTuple):
    """One detector's verdict at this update.

    ``active`` True means the condition holds now (the run state turns the first active
    finding of a kind into a firing alert, and the first inactive one after it into a
    resolved alert). ``severity`` is ``info``, ``warning`` or ``critical``.
    """

    kind: str
    severity: str
    active: bool
    step: int
    message: str = ""


class MonitorState(NamedTuple):
    """What `RunMonitor.update_*` returns: the scores and this update's findings."""

    step: int
    l_obs: float
    l_pred: float | None = None
    band_lo: float | None = None
    band_hi: float | None = None
    D: float | None = None
    Q: float | None = None
    T: float | None = None
    W: float | None = None
    alert: bool = False
    findings: tuple[Finding, ...] = ()
