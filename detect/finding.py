"""Values the detectors hand to the run state: findings and the monitor state."""

from __future__ import annotations

from typing import NamedTuple


class Finding(NamedTuple):
    """One detector's verdict at this update.

    ``active`` True means the condition holds now (the run state turns the first active
    finding of a kind into a firing alert, and the first inactive one after it into a
    resolved alert). ``severity`` is ``info``, ``warning`` or ``critical``. ``message``:
    the sentence a person reads (`messages`); ``details``: the statistics behind it.
    """

    kind: str
    severity: str
    active: bool
    step: int
    message: str = ""
    details: str = ""


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


class Verdict(NamedTuple):
    """What a detector says at its last point (`Detector.verdict`): the contract between
    the detectors and the arbitration.

    ``active``: its condition holds; ``severity``: what it asks for (``info``,
    ``warning``, ``critical``; the arbitration and the `effect` gate may lower it);
    ``effect``: the deviation in loss units (NaN where it measures none); ``scale``: its
    time scale in steps (how long it takes to say it); ``onset``: the step its condition
    began (None before one); ``facts``: the values its message needs, by name.
    """

    kind: str
    active: bool
    severity: str
    effect: float = float("nan")
    scale: float = float("nan")
    onset: int | None = None
    facts: dict = {}
