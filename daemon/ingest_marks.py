"""A run's seq marks: per emitter id, the highest seq processed, where its replies go, and
when it last sent. One value held by the run (``RunState.marks``), snapshotted as one.

``admit_seq`` is the daemon's half of the acknowledged-delivery rule (the protocol is in
``emitter_link.py``'s docstring) and returns a verdict; what a verdict costs (a counter,
a nack) is the link's (``EmitterLink.answer``):

- ``OK`` (0): ``seq == hwm + 1``, or a gap the emitter no longer holds with nothing lost:
  admitted, the mark moves on;
- ``DUPLICATE``: ``seq <= hwm``: dropped;
- ``NACK``: ``seq > hwm + 1`` while the emitter still holds older events: dropped, the
  mark stays (everything after it is asked for again);
- ``n > 0`` (a gap): admitted, the mark moves on, and ``n`` events before it are lost
  for good (the emitter's buffer overflowed: ``base > hwm + 1``).

Plain dicts and ints, no I/O: the same code compiles (``daemon/build.py``).

    >>> m = EmitterMarks()
    >>> [m.admit_seq("e", s, 1) for s in (1, 2, 2, 5)], m.admit_seq("e", 9, 9), m.hwm
    ([0, 0, -1, -2], 6, {'e': 9})
"""

from __future__ import annotations

from typing import Any

OK = 0
DUPLICATE = -1
NACK = -2


class EmitterMarks:
    """``hwm``: emitter id -> highest seq processed; ``identities``: emitter id -> the
    ROUTER identity its acks and alerts go to (a connection's: never stored); ``seen``:
    emitter id -> when it last sent the run an event (idle ids are evicted)."""

    def __init__(self) -> None:
        self.hwm: dict[str, int] = {}
        self.identities: dict[str, bytes] = {}
        self.seen: dict[str, float] = {}

    def admit_seq(self, em: str, seq: int, base) -> int:
        """The verdict on event ``seq`` of ``em`` (``base``: the oldest seq the emitter
        still holds, None when it says nothing); the mark moves on when it is admitted."""
        hwm = self.hwm.get(em, 0)
        if seq == hwm + 1:
            self.hwm[em] = seq
            return OK
        if seq <= hwm:
            return DUPLICATE
        lost = 0
        if base is not None:
            if seq > max(hwm + 1, base):
                return NACK
            if base > hwm + 1:
                lost = base - hwm - 1
        self.hwm[em] = seq
        return lost

    def sent(self, em: str, identity: bytes, now: float) -> None:
        """``em`` sent events just now from ``identity`` (where its replies go)."""
        self.seen[em] = now
        if self.identities.get(em) != identity:
            self.identities[em] = identity

    def knows(self, em: str) -> bool:
        return em in self.hwm or em in self.identities

    def known(self) -> set[str]:
        """Every emitter id the marks hold anything for."""
        return self.hwm.keys() | self.identities.keys() | self.seen.keys()

    def evict_idle(self, now: float, idle_s: float) -> int:
        """Forget the ids silent for ``idle_s`` (trainer processes that are gone)."""
        idle = [em for em in self.known() if now - self.seen.get(em, 0.0) >= idle_s]
        for em in idle:
            self.hwm.pop(em, None)
            self.identities.pop(em, None)
            self.seen.pop(em, None)
        return len(idle)

    def snapshot(self) -> dict[str, Any]:
        """The stored value: the marks and when each id last sent (identities belong to
        connections and are not kept)."""
        return {"hwm": dict(self.hwm), "seen": dict(self.seen)}

    @classmethod
    def restore(cls, snap: dict[str, Any]) -> "EmitterMarks":
        marks = cls()
        marks.hwm = {str(k): int(v) for k, v in (snap.get("hwm") or {}).items()}
        marks.seen = {str(k): float(v) for k, v in (snap.get("seen") or {}).items()}
        return marks
