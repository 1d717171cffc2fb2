"""The daemon's own counters, bumped on the event loop and read at scrape time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Stats:
    received: Counter = field(default_factory=Counter)   # by event type
    rejected: Counter = field(default_factory=Counter)   # by reason
    dropped: Counter = field(default_factory=Counter)    # valid events not processed, by reason
    alerts: Counter = field(default_factory=Counter)     # by (kind, severity), firing only
    http_refused: Counter = field(default_factory=Counter)  # by reason (web/guard.py)
    frames: int = 0
    loop_errors: int = 0
    evicted_emitters: int = 0  # emitter ids dropped from a full run after emitter_idle_s
