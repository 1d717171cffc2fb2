"""Which alerts an ``on_alert`` action reacts to: the base of `actions` and `rewind`."""

from __future__ import annotations

from typing import Iterable

SEVERITIES = ("info", "warning", "critical")


class AlertFilter:
    """Which alerts an action reacts to: firing ones at or above ``min_severity``, of ``kinds``."""

    def __init__(self, min_severity: str = "critical", kinds: Iterable[str] | None = None) -> None:
        if min_severity not in SEVERITIES:
            raise ValueError(f"min_severity must be one of {SEVERITIES}, got {min_severity!r}")
        self.min_severity = min_severity
        self.kinds = None if kinds is None else frozenset(kinds)

    def matches(self, alert: dict) -> bool:
        if alert.get("status", "firing") != "firing":
            return False
        if self.kinds is not None and alert.get("kind") not in self.kinds:
            return False
        sev = alert.get("severity", "info")
        return sev in SEVERITIES and SEVERITIES.index(sev) >= SEVERITIES.index(self.min_severity)
