"""The daemon's half of the acknowledged-delivery protocol: per-emitter seq, nack, ack.

The protocol has two halves that only make sense together; the trainer's half is in
``emitters/emitter.py`` (its "Acknowledged delivery" paragraph, and ``_on_ack``,
``_resend``, ``_check_resend``). docs/PROTOCOL.md and docs/RELIABILITY.md
describe it for users.

**Emitter (trainer side).** Each emitter numbers its events ``seq`` = 1, 2, 3, ...
(one counter per emitter id, not per run) and keeps every sent event in a bounded
resend buffer until the daemon acks its seq. Every frame carries ``base``: the oldest
seq the emitter still holds. An ``ack`` with ``seq = n`` drops everything up to ``n``;
an ack with ``resend`` (a *nack*) makes it send everything held after ``n`` again, in
order; with no ack progress for ``ack_timeout_s`` it re-sends on its own (backing off).
A ``dropped`` reply (a frame refused unread by its peer's bucket: ``drop_notice.py``)
makes it re-send its newest frame after the reply's ``retry_s``, and honour the next
nack even for a gap it re-sent already.

**Daemon.** Per run and emitter the run keeps ``hwm``: the highest seq whose effects
are in the run's state (``RunState.marks``, an ``EmitterMarks``: daemon/ingest_marks.py,
stored in the run's snapshot). For each event, ``EmitterMarks.admit_seq`` gives a verdict:

- ``seq <= hwm``: a duplicate (a re-send, after a nack or a restart): dropped,
  counted ``duplicate``.
- ``seq == hwm + 1``: admitted, ``hwm`` moves on.
- ``seq > hwm + 1`` while the emitter still holds older events (``seq > base``):
  dropped, counted ``out_of_order``, and a nack (at most one per ``NACK_INTERVAL_S``
  for the same hwm) asks for everything after ``hwm``.
- ``seq > hwm + 1`` and nothing older is held (``seq == base``, or a frame without
  ``base`` from an emitter with no resend buffer): admitted; events the emitter no
  longer holds (``base > hwm + 1``: its buffer overflowed) are counted ``seq_gap``.

This module is the sending half: what a verdict costs (``answer``: the counters, the
nack), and the acks.

Acks are sent only once the run's snapshot holding that ``hwm`` has committed
(``ack``, called by ``daemon/snapshots.py``), so an acked event is never lost to a
crash: a restart resumes from the stored ``hwm`` and the emitter re-sends the rest.
Without a store the same acks are sent at each snapshot interval, unwritten.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from wtwin.emitters import wire

from .ingest_marks import DUPLICATE

NACK_INTERVAL_S = 0.1  # the emitter ignores a repeat while its re-send is on its way (resend.py)
MAX_NACKS = 65_536  # nack pacing entries kept (emitters with a gap pending), oldest dropped

Send = Callable[[bytes, bytes], bool]


class EmitterLink:
    def __init__(self, stats, send: Send) -> None:
        self.stats = stats
        self.send = send
        self._nacks: dict[str, tuple[int, float]] = {}  # emitter -> (hwm asked after, when)

    def answer(self, run, em: str, verdict: int) -> bool:
        """What a verdict other than ``OK`` costs (``EmitterMarks.admit_seq``): True for
        a gap (processed; counted once, not by its size: a client chooses the size), False
        for a duplicate or a nack."""
        if verdict > 0:
            self.stats.dropped["seq_gap"] += 1
            return True
        if verdict == DUPLICATE:
            self.stats.dropped["duplicate"] += 1
            return False
        self.stats.dropped["out_of_order"] += 1  # the emitter still holds the gap
        self._nack(run, em, run.marks.hwm.get(em, 0))
        return False

    def _nack(self, run, em: str, hwm: int) -> None:
        last = self._nacks.pop(em, None)  # re-inserted below or put back: newest last
        now = time.monotonic()
        if last is not None and last[0] == hwm and now - last[1] < NACK_INTERVAL_S:
            self._nacks[em] = last
            return
        if len(self._nacks) >= MAX_NACKS:  # bounded: the oldest pacing entry goes first
            del self._nacks[next(iter(self._nacks))]
        self._nacks[em] = (hwm, now)
        identity = run.marks.identities.get(em)
        if identity is not None:
            self.send(identity, wire.reply("ack", seq=hwm, emitter=em, resend=True))

    @staticmethod
    def marks(runs: Iterable) -> list[tuple]:
        """(run, emitter, seq) for every emitter of ``runs``, as of now (before a snapshot)."""
        return [(r, em, seq) for r in runs for em, seq in r.marks.hwm.items()]

    def ack(self, marks: Iterable[tuple]) -> None:
        """Tell each emitter that everything up to its seq is stored (``marks`` from
        ``marks()``, taken with the snapshot that has committed)."""
        for run, em, seq in marks:
            identity = run.marks.identities.get(em)
            if identity is not None:
                self.send(identity, wire.reply("ack", seq=seq, emitter=em))

    def forget(self, run) -> None:
        """A run left memory: its emitters' nack pacing goes with it."""
        for em in run.marks.hwm:
            self._nacks.pop(em, None)
