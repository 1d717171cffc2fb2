"""What one client may put between the socket and the handlers (issue 24): bytes, bounded.

Two bounds, both in bytes, not messages:

- **Queued.** libzmq queues each connection's messages in a pipe of ``RCVHWM``
  messages; a message is at most ``max_frame_bytes``, so the pipe holds at most
  ``RCVHWM x max_frame_bytes``. ``rcvhwm()`` picks ``RCVHWM`` for the next connection
  from the budget: ``peer_queue_bytes`` per connection, and ``queue_bytes`` shared by the
  live connections (at least one message each). A full pipe is back-pressure: libzmq
  stops reading that connection's TCP socket, the sender's own queue fills, and its
  sends fail there (the emitter counts them and re-sends what was not acked).
- **Rate.** A token bucket per peer (the CURVE key when CURVE is on, else the
  connection): ``peer_rate_bytes_s`` refilled, ``peer_burst_bytes`` deep. It is
  enforced while peers contend: the handlers are behind (the last drain ended with
  frames still waiting) and another peer sent within the last 5 s. Then a frame
  over its peer's bucket is dropped before it is decoded, which costs a receive and
  nothing else, and is counted (``wtwind_frames_dropped_total{reason="peer_rate"}`` and
  its bytes). A flood costs the flooder its own events; the emitter of a legitimate
  trainer that went over re-sends them once its acks stop coming. A lone producer (a
  benchmark, a replay after a restart) takes all the daemon has: nobody waits behind it.

The table of buckets is bounded (``MAX_PEERS``): full buckets (peers at rest) go first,
then the least recently seen.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

MAX_PEERS = 4096
ACTIVE_S = 5.0  # a peer that sent this recently still contends (one flood frame can take 1 s)


class PeerBuckets:
    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic,
                 max_peers: int = MAX_PEERS) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be > 0")
        self.rate, self.burst, self.clock, self.max_peers = rate, burst, clock, max_peers
        self._peers: OrderedDict[bytes | str, tuple[float, float]] = OrderedDict()  # (tokens, when)
        self.dropped_frames = 0
        self.dropped_bytes = 0

    def take(self, peer: bytes | str, n: int, backlogged: bool = True) -> bool:
        """True when ``peer`` may send ``n`` bytes now (taken), else False (counted). An
        empty bucket refuses only while peers contend: ``backlogged`` (the handlers are
        behind) and another peer sent within the last ``ACTIVE_S``."""
        now = self.clock()
        tokens, when = self._peers.pop(peer, (self.burst, now))
        tokens = min(self.burst, tokens + (now - when) * self.rate)
        ok = tokens >= n or not (backlogged and self._others_active(now))
        if ok:
            tokens = max(tokens - n, -self.burst)  # a lone producer's debt is bounded too
        else:
            self.dropped_frames += 1
            self.dropped_bytes += n
        self._peers[peer] = (tokens, now)
        if len(self._peers) > self.max_peers:
            self._evict(now)
        return ok

    def _others_active(self, now: float) -> bool:
        """Another peer sent within the last ``ACTIVE_S`` (the table is in order of last use)."""
        for _peer, (_tokens, when) in reversed(self._peers.items()):
            return now - when < ACTIVE_S
        return False

    def _evict(self, now: float) -> None:
        rested = [p for p, (t, w) in self._peers.items() if t + (now - w) * self.rate >= self.burst]
        for p in rested[: max(1, len(self._peers) - self.max_peers)]:
            del self._peers[p]
        while len(self._peers) > self.max_peers:
            self._peers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._peers)


def rcvhwm(cfg, live: int) -> int:
    """Messages the next connection's pipe may hold: its share of the byte budget."""
    share = min(cfg.peer_queue_bytes, cfg.queue_bytes // max(1, live + 1))
    return max(1, share // cfg.max_frame_bytes)
