"""Frames cut short by their time slice, and the frames their peer sent behind them.

A frame may hold 10,000 events, and an attacker picks the costliest (every one a
finding): handled whole it held the loop 0.4-0.7 s, and every other trainer's frame,
its NaN included, waited behind it. Now the handler stops at its deadline and returns
the rest of the frame (`Ingest.frame` returns a callable ``rest(deadline)``); the
receiver parks it here, under the frame's peer, and goes on with other peers' frames.

- **Order**: a peer's later frames queue behind its rest (`queue`), so a run's events
  are handled in the order its trainer sent them.
- **Turns**: `serve` gives each parked peer one slice, oldest first, and moves it to the
  back: a peer with a long rest takes turns like any other, never the whole loop.
- **Bounded**: a peer may queue ``limit`` frames behind its rest (its socket pipe's
  size: the bytes stay within the receive queue's budget, they only moved); past it a
  frame is refused, counted in `dropped_frames` and `dropped_bytes`, and its emitter
  re-sends what was not acked.
"""

from __future__ import annotations

from collections import deque
from typing import Callable


class FrameBacklog:
    def __init__(self) -> None:
        # peer -> its pending work, oldest first: a rest (callable) or (identity, frame, user)
        self._peers: dict[object, deque] = {}
        self.dropped_frames = 0
        self.dropped_bytes = 0

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, peer) -> bool:
        return peer in self._peers

    def park(self, peer, rest: Callable) -> None:
        """``peer``'s frame stopped at its deadline: ``rest`` goes first in its queue."""
        queue = self._peers.get(peer)
        if queue is None:
            self._peers[peer] = deque((rest,))
        else:
            queue.appendleft(rest)

    def queue(self, peer, identity: bytes, frame: bytes, user, limit: int) -> bool:
        """A new frame of a parked ``peer`` waits behind what it sent before; False when
        ``limit`` frames wait already (refused and counted)."""
        queue = self._peers[peer]
        if len(queue) > limit:   # its rest, and ``limit`` frames
            self.dropped_frames += 1
            self.dropped_bytes += len(frame)
            return False
        queue.append((identity, frame, user))
        return True

    def serve(self, deadline: float, handle: Callable, clock: Callable[[], float]) -> int:
        """One item of each parked peer in turn, oldest first, until ``deadline``:
        ``handle(peer, item, deadline)`` runs it and returns its rest (or None). Returns
        how many items were taken up."""
        served = 0
        for peer in list(self._peers):
            if served and clock() > deadline:
                break
            queue = self._peers.pop(peer)   # served: to the back of the turns
            rest = handle(peer, queue.popleft(), deadline)
            served += 1
            if rest is not None:
                queue.appendleft(rest)
            if queue:
                self._peers[peer] = queue
        return served
