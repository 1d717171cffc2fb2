"""The emitter's resend buffer: events sent and not yet acked, held to be sent again.

Acknowledged delivery (docs/RELIABILITY.md), the trainer's half: every sent event is
held (at most ``resend_size``; past that the oldest goes, counted as
``resend_evicted``) until the daemon acks its ``seq``. An ack with ``resend`` (a nack)
asks for everything held after its seq. The newest frame goes again, a probe, after
``ack_timeout_s`` without ack progress (the wait then doubles, at most 60 s, until acks
progress) and after a ``dropped`` reply's ``retry_s`` (the daemon dropped a frame of
ours unread: ``wtwin.daemon.drop_notice``); a gap before it, the daemon nacks. The
daemon's half is ``wtwin.daemon.emitter_link``. Touched by the emitter's I/O thread only.
"""

from __future__ import annotations

import collections
import time

MAX_ACK_WAIT_S = 60.0
MIN_RETRY_S, MAX_RETRY_S = 0.01, 1.0   # a dropped frame's re-send: the daemon's hint, clamped


class ResendBuffer:
    """What the I/O thread holds for a re-send, and when it must re-send."""

    def __init__(self, size: int, ack_timeout_s: float, stats: collections.Counter) -> None:
        self.size = size
        self.ack_timeout_s = ack_timeout_s
        self.stats = stats
        self.unacked: collections.deque = collections.deque()  # events sent, not acked
        self.acked = 0
        self.ack_seen = False
        self._progress = time.monotonic()
        self._wait = ack_timeout_s  # doubles on each timeout without progress
        self._resent_after, self._resent_at = -1, 0.0
        self._newest = 0       # the first seq of the newest frame sent
        self._probe_at = 0.0   # when to re-send it: the daemon said it dropped a frame of ours
        self._lost = False     # ... since our last re-send, which may be what it dropped

    def hold(self, events: list) -> None:
        """``events``, one frame's, were sent."""
        self._newest = events[0]["seq"]
        unacked = self.unacked
        unacked.extend(events)
        while len(unacked) > self.size:
            unacked.popleft()
            self.stats["resend_evicted"] += 1

    def on_ack(self, seq: int, resend: bool) -> bool:
        """Take the daemon's ack of ``seq``; True when it asks for a re-send after ``seq``.

        ``resend`` means "I have up to seq in memory": not an ack (not yet persisted). A
        request for the re-send that is still on its way is counted and ignored."""
        self.ack_seen = True
        if resend:
            if (seq == self._resent_after and not self._lost
                    and time.monotonic() - self._resent_at < self.ack_timeout_s):
                self.stats["resend_requests_ignored"] += 1
                return False
            return True
        if seq > self.acked:
            self.acked = seq
            self._progress = time.monotonic()
            self._wait = self.ack_timeout_s
        unacked = self.unacked
        while unacked and unacked[0]["seq"] <= seq:
            unacked.popleft()
        return False

    def on_dropped(self, retry_s) -> None:
        """The daemon dropped a frame of ours unread: the newest frame goes again after
        ``retry_s`` (clamped), and the next nack is honoured even for a gap re-sent
        already (that re-send may be the frame it dropped)."""
        self.stats["dropped_by_daemon"] += 1
        self._lost = True
        wait = retry_s if type(retry_s) in (int, float) and retry_s == retry_s else 0.0
        self._probe_at = time.monotonic() + min(max(wait, MIN_RETRY_S), MAX_RETRY_S)

    def due(self) -> int:
        """The seq to re-send after, when a re-send is due now, else -1. No ack progress
        for the current wait, or the daemon's word that it dropped a frame of ours: the
        newest frame goes again, a probe. The daemon has it (a duplicate, cheap: its acks
        are only slow), or takes it, or nacks the gap before it (a restart, a lost frame),
        and what it asks for goes then. Re-sending all that is held instead cost a trainer
        whose acks were slow hundreds of duplicates at each timeout, and under a flood its
        share of the loop."""
        if self.timed_out() or (self._probe_at and time.monotonic() >= self._probe_at):
            self._probe_at = 0.0
            if self.unacked:
                return max(self.acked, self._newest - 1)
        return -1

    def timed_out(self) -> bool:
        """No ack progress for the current wait while events are held (the wait doubles)."""
        if self.ack_seen and self.unacked and time.monotonic() - self._progress > self._wait:
            self._wait = min(2 * self._wait, MAX_ACK_WAIT_S)  # a slow daemon is not hammered
            return True
        return False

    def take_after(self, after: int) -> list:
        """The held events with seq > ``after``, in seq order, out of the buffer (the
        rest awaits its ack)."""
        self._progress = self._resent_at = time.monotonic()
        self._resent_after, self._lost = after, False
        events = [e for e in self.unacked if e["seq"] > after]
        while self.unacked and self.unacked[-1]["seq"] > after:
            self.unacked.pop()
        return events
