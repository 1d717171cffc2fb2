"""Whether wtwind answers: one warning in the trainer's log when nothing has been acked
for ``warn_after_s`` while events wait for an ack, and one line when acks come back.

Plain stdlib ``logging`` (logger ``wtwin.emitters``): with no logging configured,
Python prints warnings to stderr; a trainer that configures logging gets them in its
own log. Owned by the emitter's I/O thread; the caller's thread only reads the fields.
"""

from __future__ import annotations

import logging

log = logging.getLogger("wtwin.emitters")


class Reach:
    def __init__(self, endpoint: str, warn_after_s: float) -> None:
        if not warn_after_s > 0:
            raise ValueError("warn_unacked_s must be > 0 seconds")
        self.endpoint = endpoint
        self.warn_after_s = warn_after_s
        self.waiting_since: float | None = None  # monotonic: oldest wait for an ack not answered
        self.unreachable = False
        self.warnings = 0

    def sent(self, now: float) -> None:
        """Events went out: from now on an answer is due."""
        if self.waiting_since is None:
            self.waiting_since = now

    def heard(self, now: float, all_acked: bool) -> None:
        """An ack from the daemon: it is there; the wait starts over if events remain."""
        if self.unreachable:
            self.unreachable = False
            log.warning("wtwin: wtwind at %s acks again after %.0f s of silence",
                        self.endpoint, now - (self.waiting_since or now))
        self.waiting_since = None if all_acked else now

    def check(self, now: float, waiting: int) -> None:
        """Called on each turn of the I/O loop; warns once per silence."""
        if self.unreachable or self.waiting_since is None:
            return
        if now - self.waiting_since >= self.warn_after_s:
            self.unreachable = True
            self.warnings += 1
            log.warning("wtwin: nothing acked by wtwind at %s for %.0f s (%d events waiting); "
                        "is wtwind running and listening there? Events are held and re-sent "
                        "when it answers (up to replay_size)",
                        self.endpoint, now - self.waiting_since, waiting)

    def closing(self, now: float, waiting: int) -> None:
        """At close: a short run that never heard back still gets its one line."""
        if waiting and self.waiting_since is not None and not self.unreachable:
            self.warnings += 1
            log.warning("wtwin: closing with %d events never acked by wtwind at %s "
                        "(waited %.1f s); is wtwind running and listening there?",
                        waiting, self.endpoint, now - self.waiting_since)

    def silent_s(self, now: float) -> float:
        return 0.0 if self.waiting_since is None else now - self.waiting_since
