"""The `Alert` value: what the daemon hands to every sink.

Sinks never import the daemon; they receive these frozen values. An alert has a
lifecycle keyed by ``(run, kind)``: ``firing`` then ``resolved``. Its idempotency key
is stable across retries and daemon restarts, so receivers can drop duplicates.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, asdict
from typing import Any, Mapping

KINDS = (
    "drift",
    "spike",
    "divergence",
    "plateau",
    "nonfinite",
    "overfit",
    "stalled",
    "resume_jump",
    "frozen_loader",
    "chance",
    "spectral",
    "behind",
    "throughput",
    "memory",
    "early_rise",
)
SEVERITIES = ("info", "warning", "critical")
STATUSES = ("firing", "resolved")


@dataclass(frozen=True, kw_only=True)
class Alert:
    """One alert transition for one run and kind.

    ``started_at``/``ended_at`` are Unix seconds (wall clock of the daemon when the
    alert fired/resolved); ``step`` is the training step of the offending event.
    ``message`` is the sentence a person reads; ``details`` the statistics behind it.
    """

    run: str
    kind: str
    severity: str
    status: str
    step: int
    started_at: float
    ended_at: float | None = None
    message: str = ""
    details: str = ""
    loss: float | None = None
    forecast: float | None = None
    W: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Alert.kind must be one of {KINDS}, got {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"Alert.severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.status not in STATUSES:
            raise ValueError(f"Alert.status must be one of {STATUSES}, got {self.status!r}")

    @property
    def fingerprint(self) -> str:
        """Stable id of the (run, kind) alert series, as Alertmanager uses it."""
        return hashlib.sha256(f"{self.run}\x00{self.kind}".encode()).hexdigest()[:16]

    @property
    def idempotency_key(self) -> str:
        """Same for every retry of this transition, different for the next one."""
        raw = f"{self.run}\x00{self.kind}\x00{self.started_at:.6f}\x00{self.status}\x00{self.severity}"
        return "wtw_" + hashlib.sha256(raw.encode()).hexdigest()[:24]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = dict(self.labels)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Alert":
        return cls(**{k: d[k] for k in d if k in cls.__dataclass_fields__})
