"""Values that cross the job runner's boundary: Job, JobResult, JobStats."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..spectral.result import LayerResult

OUTCOMES = ("ok", "failed", "timeout", "crashed", "cancelled", "skipped", "dropped", "refused")
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)


@dataclass(frozen=True, kw_only=True)
class Job:
    run: str
    step: int
    path: str
    format: str | None = None
    want: tuple[str, ...] = ("analyze",)
    epoch: int | None = None
    submitted_at: float = field(default_factory=time.time)


def job_from_event(run: str, event: dict) -> Job:
    """A Job from a validated wire ``checkpoint`` event (emitters/wire.py)."""
    want = tuple(event.get("want") or ("analyze",))
    return Job(run=run, step=int(event["step"]), path=str(event["path"]), format=event.get("format"),
               want=want, epoch=event.get("epoch"))


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """What the loop gets back. ``layers`` is empty unless the job analysed."""

    run: str
    step: int
    path: str
    want: tuple[str, ...]
    epoch: int | None
    outcome: str
    reason: str = ""
    error: str = ""
    duration_s: float = 0.0
    layers: tuple[LayerResult, ...] = ()
    projected_path: str | None = None
    projection: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @classmethod
    def build(cls, job: Job, outcome: str, reason: str, error: str, elapsed: float, raw: dict[str, Any]) -> "JobResult":
        layers = tuple(LayerResult(**d) for d in raw.get("layers") or ())
        return cls(run=job.run, step=job.step, path=job.path, want=job.want, epoch=job.epoch, outcome=outcome,
                   reason=reason, error=error, duration_s=elapsed, layers=layers,
                   projected_path=raw.get("projected_path"), projection=raw.get("projection") or {})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, for the store."""
        return {"run": self.run, "step": self.step, "path": self.path, "want": list(self.want),
                "epoch": self.epoch, "outcome": self.outcome, "reason": self.reason, "error": self.error,
                "duration_s": self.duration_s, "layers": [lr.to_dict() for lr in self.layers],
                "projected_path": self.projected_path, "projection": self.projection}


@dataclass(frozen=True, kw_only=True)
class JobStats:
    """Snapshot for /metrics. ``duration_buckets`` is cumulative (le, count) pairs."""

    queue_depth: int
    running: int
    counts: dict[str, int]
    duration_buckets: tuple[tuple[float, int], ...]
    duration_sum: float
    duration_count: int
