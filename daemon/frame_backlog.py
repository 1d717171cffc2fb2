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
- **Bounded**: a peer may queue ``limit`` frames behind its rest (what
  ``peer_queue_bytes`` holds of the largest frames), and all peers together ``max_bytes`` (a quarter of ``[listen] queue_bytes``);
  past either a frame is refused, counted in `dropped_frames` and `dropped_bytes`, and
  its emitter re-sends what was not acked. The rests hold decoded events (up to about
  600 B each as dicts): while they hold ``max_events``, a new frame is not cut but
  handled whole, as before slices (`has_room`), so a thousand connections of big frames
  cannot park a thousand decoded frames.
"""

from __future__ import annotations

from collections import deque
from typing import Callable


MAX_EVENTS = 50_000    # events the parked rests may hold together (about 600 B each as dicts)


class FrameBacklog:
    def __init__(self, max_bytes: int, max_events: int = MAX_EVENTS) -> None:
        # peer -> its pending work, oldest first: a rest (callable) or (identity, frame, user)
        self._peers: dict[object, deque] = {}
        self.max_bytes, self.max_events = max_bytes, max_events
        self.bytes = 0     # of the frames queued behind rests
        self.events = 0    # held by the rests
        self.dropped_frames = 0
        self.dropped_bytes = 0

    def has_room(self) -> bool:
        """A new frame may be cut and its rest parked."""
        return self.events < self.max_events

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, peer) -> bool:
        return peer in self._peers

    def park(self, peer, rest) -> None:
        """``peer``'s frame stopped at its deadline: ``rest`` (a callable with ``events``)
        goes first in its queue."""
        self.events += rest.events
        queue = self._peers.get(peer)
        if queue is None:
            self._peers[peer] = deque((rest,))
        else:
            queue.appendleft(rest)

    def queue(self, peer, identity: bytes, frame: bytes, user, limit: int) -> bool:
        """A new frame of a parked ``peer`` waits behind what it sent before; False when
        ``limit`` frames wait already (refused and counted)."""
        queue = self._peers[peer]
        if len(queue) > limit or self.bytes + len(frame) > self.max_bytes:   # its rest, and ``limit`` frames
            self.dropped_frames += 1
            self.dropped_bytes += len(frame)
            return False
        self.bytes += len(frame)
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
            item = queue.popleft()
            if callable(item):
                self.events -= item.events
            else:
                self.bytes -= len(item[1])
            rest = handle(peer, item, deadline)
            served += 1
            if rest is not None:
                self.events += rest.events
                queue.appendleft(rest)
            if queue:
                self._peers[peer] = queue
        return served
