"""What an emitter is asked to do: one frozen, keyword-only record, checked at construction.

``wtwin.emitters.connect(run=..., **options)`` and ``Emitter(endpoint, run, **options)``
build an ``EmitterSettings`` from their keyword arguments (the same names as before, so
existing calls keep working); ``Emitter.from_settings`` takes one directly. The callbacks
(``on_alert``, ``on_projection``) are not settings: they are the caller's code, passed to
the emitter beside them.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import wire


@dataclass(frozen=True, kw_only=True)
class EmitterSettings:
    """One run's emitter: where it sends, what it announces, how much it buffers.

    ``endpoint`` and ``endpoints`` are the same thing under two names (either may hold a
    list: shards, docs/SHARDING.md); ``None`` means ``$WTWIN_ENDPOINT`` or the local
    socket. ``run`` ``None`` means a generated id, whose secret is never persisted.
    """

    endpoint: str | Sequence[str] | None = None
    endpoints: str | Sequence[str] | None = None
    run: str | None = None
    # announced in the run's run_start frame (docs/PROTOCOL.md)
    config: Mapping[str, Any] = field(default_factory=dict)
    preset: str | None = None
    kind: str | None = None          # selects the daemon's preset when none is named
    resumed_from: str | None = None
    # this trainer goes on with an ended run of the same name (a checkpoint resume): without
    # it, a run_start under the name of an ended run starts a new run (docs/PROTOCOL.md)
    resume: bool = False
    reference: str | Sequence[str] | None = None   # docs/REFERENCES.md
    group: str | None = None
    # the I/O thread's bounds and pace
    queue_size: int = 10_000
    batch_max: int = 512
    heartbeat_s: float = 10.0
    linger_ms: int = 500
    resend_size: int = 20_000
    ack_timeout_s: float = 5.0
    warn_unacked_s: float = 30.0
    # authentication: CURVE keys, the run's secret (emitters/run_secret.py)
    curve: Mapping[str, Any] | None = None
    secret: str | None = None
    secret_dir: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        if self.queue_size < 1 or self.batch_max < 1:
            raise ValueError("queue_size and batch_max must be >= 1")
        if self.resend_size < 0 or self.ack_timeout_s <= 0:
            raise ValueError("resend_size must be >= 0 and ack_timeout_s > 0")
        if self.endpoint and self.endpoints:
            raise ValueError("give endpoint or endpoints, not both (either may hold a list)")
        run = self.run
        if run is not None and not (isinstance(run, str) and run.isprintable() and 0 < len(run) <= 200):
            raise ValueError(f"run must be 1..200 printable characters (no CR, LF or tabs), not {run!r}")

    @classmethod
    def of(cls, endpoint=None, run=None, *, replay_size: int | None = None,
           **options) -> "EmitterSettings":
        """From ``connect``'s and ``Emitter``'s arguments; ``replay_size`` is the old name
        of ``resend_size`` (still accepted, with a warning)."""
        if replay_size is not None:
            warnings.warn("Emitter(replay_size=...) is now resend_size=...", DeprecationWarning,
                          stacklevel=3)
            options["resend_size"] = replay_size
        return cls(endpoint=endpoint, run=run, **options)

    def run_start(self) -> dict[str, Any]:
        """The fields of this run's ``run_start`` event."""
        start: dict[str, Any] = {"config": dict(self.config or {})}
        for name in ("preset", "kind", "resumed_from"):
            if getattr(self, name):
                start[name] = getattr(self, name)
        if self.resume and not self.resumed_from and self.run is not None:
            start["resumed_from"] = self.run      # goes on with itself
        start.update(wire.reference_fields(self.reference, self.group))
        return start
