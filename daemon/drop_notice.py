"""Telling a connection that its frame was dropped unread, so that its emitter re-sends it.

A frame refused by its peer's bucket, or behind a full backlog (receiver.py), is dropped
before it is decoded: the daemon knows its connection, not its run, emitter or seq.
Before this, the emitter learnt of the loss from a later frame's gap (a nack), or, when
the lost frame was its last (a NaN, then nothing), only from its ack timeout: 5 s or
more, while the page waited. Now the connection gets a ``dropped`` reply whose
``retry_s`` is when the peer's next frame would be taken, were nobody else to spend the
loop meanwhile (``PeerBuckets.wait_s``). The emitter then re-sends its newest frame,
and whatever a nack for a gap asks for after it (emitters/resend.py).

Bounded: at most one notice per connection per ``INTERVAL_S``, from a pacing table of
``MAX_ENTRIES`` connections (the least recently told goes first). A notice the
connection's queue cannot take is counted with the other replies
(``wtwind_replies_dropped_total``): a flooder that reads nothing costs one failed send.
"""

from __future__ import annotations

import time
from typing import Callable

from wtwin.emitters import wire

INTERVAL_S = 0.1   # per connection: a trainer's re-send waits at most this for its notice
MAX_ENTRIES = 4096


class DropNotices:
    def __init__(self, send: Callable[[bytes, bytes], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.send, self.clock = send, clock
        self._told: dict[bytes, float] = {}   # identity -> when, least recently told first
        self.sent = 0

    def due(self, identity: bytes) -> bool:
        """``identity`` may be told now (not within ``INTERVAL_S``); if so, from now on it
        has been (call `tell` next)."""
        now = self.clock()
        last = self._told.get(identity)
        if last is not None and now - last < INTERVAL_S:
            return False
        self._told.pop(identity, None)
        if len(self._told) >= MAX_ENTRIES:
            del self._told[next(iter(self._told))]
        self._told[identity] = now
        return True

    def tell(self, identity: bytes, retry_s: float) -> None:
        """Say that ``identity``'s frame was dropped and when to send it again."""
        if self.send(identity, wire.reply("dropped", retry_s=round(max(0.0, retry_s), 3))):
            self.sent += 1
