"""The ``[state]`` config section: where the SQLite database lives and how often run
state is written. (``[curve]`` is in ``daemon/zmq_auth.py``, beside the code it configures.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import require

SYNC_MODES = ("normal", "full")


@dataclass(frozen=True, kw_only=True)
class StateConfig:
    """Durable state: run registry, detector snapshots, per-emitter seqs, alert outbox.

    ``path`` empty means ``$XDG_STATE_HOME/wtwind/wtwind.db`` (``~/.local/state/...``).
    Run snapshots are written by a writer thread every ``flush_interval_s``, sooner once
    ``flush_max_events`` events are unwritten, and at shutdown. Snapshots are taken on the
    event loop, so periodic ones are paced to at most ``flush_share`` of the loop's time:
    with thousands of busy runs the interval stretches instead of the loop stalling (the
    emitters keep the unacknowledged events meanwhile). ``synchronous`` is the
    SQLite mode for those (``normal`` survives a process crash, ``full`` also power
    loss), and for delivery outcomes. Alert and new outbox rows are always committed with
    ``synchronous=FULL``.
    """

    enabled: bool = True
    path: str = ""
    flush_interval_s: float = 0.5
    flush_max_events: int = 50_000
    flush_share: float = 0.1
    synchronous: str = "normal"
    busy_timeout_s: float = 2.0
    retention_days: float = 30.0
    max_runs: int = 10_000
    max_bytes: int = 2 * 1024 ** 3
    prune_interval_s: float = 60.0

    def __post_init__(self) -> None:
        require(0.01 <= self.flush_interval_s <= 60, "flush_interval_s: must be in [0.01, 60] seconds")
        require(self.flush_max_events >= 1, "flush_max_events: must be >= 1")
        require(0 < self.flush_share <= 1, "flush_share: must be in (0, 1] (a fraction of the loop's time)")
        require(self.synchronous in SYNC_MODES, f"synchronous: {self.synchronous!r} is not one of {SYNC_MODES}")
        require(self.busy_timeout_s >= 0, "busy_timeout_s: must be >= 0")
        require(self.retention_days > 0, "retention_days: must be > 0 days")
        require(self.max_runs >= 1, "max_runs: must be >= 1 stored run")
        require(self.max_bytes >= 1024 ** 2, "max_bytes: must be >= 1 MiB")
        require(1 <= self.prune_interval_s <= 86_400, "prune_interval_s: must be in [1, 86400] seconds")


def default_state_path(environ: Mapping[str, str]) -> str:
    home = environ.get("HOME") or os.path.expanduser("~")
    base = environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return str(Path(base) / "wtwind" / "wtwind.db")
