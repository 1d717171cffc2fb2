"""What one client may put between the socket and the handlers, bounded.

- **Queued bytes.** libzmq queues each connection's messages in a pipe of ``RCVHWM``
  messages; a message is at most ``max_frame_bytes``, so the pipe holds at most
  ``RCVHWM x max_frame_bytes``. ``rcvhwm()`` picks ``RCVHWM`` once, before the socket
  binds: ``peer_queue_bytes`` per connection, and ``queue_bytes`` shared by
  ``max_connections`` (at least one message each). It is never changed on live pipes:
  libzmq then stops reading a connection whose pipe was full (zeromq/libzmq#2509), and
  a trainer that connected before a flood of connections was never read again, about
  one flood in three (2026-12-07); done on disconnects, it crashed wtwind. Past
  ``max_connections`` open at once, each adds its pipe, ``RCVHWM x max_frame_bytes``
  (said in the log, ``connections_over_sizing``). A full pipe is back-pressure:
  libzmq stops reading that connection's socket, the sender's own queue fills, and its
  sends fail there (the emitter counts them and re-sends what was not acked).
- **Loop time.** What a frame costs is not its size (a batch of thousands of losses
  costs the loop far more than its bytes suggest; so does a small NaN on a new run: a
  run creation, a detector build and an alert commit), so each peer (the CURVE key when CURVE is on,
  else the connection) has a token bucket of *handler seconds*: refilled at
  ``peer_loop_share`` seconds a second, ``peer_burst_s`` deep, charged with what each
  of its frames took (a frame handled within ``FREE_S`` is free: cheap frames keep
  ZeroMQ's round-robin over connections quick; what delays the others is an expensive
  frame). The same charges go to one shared bucket (``loop_share`` a second): while it
  is empty, a peer goes on only within a light allowance of a tenth of its own rate
  (a trainer's frames are mostly free), and what those allowances spend is drawn from
  one pool too (a tenth of ``loop_share``), except by a peer that kept ``RESTED`` of its
  allowance (a trainer's frames are free; its own refits and re-sends spend some). So forty flooding connections
  together take about ``loop_share`` of the loop, and ZeroMQ's round-robin stays quick
  for a trainer's frames (without the pool, each connection spent its own allowance and
  the page of the all-at-once flood came 9-16 s late, 2026-12-07). The garbage
  collector's pauses are not the frame's that met them: the shared bucket pays them
  (``Receiver._timed``, daemon/gc_clock.py). It is enforced while peers contend: the handlers are behind (the
  last drain ended with frames still waiting) and another peer sent within
  ``ACTIVE_S``. Then a frame of a peer in debt is dropped before it is decoded (it
  costs a receive) and counted (``wtwind_frames_dropped_total{reason="peer_rate"}``,
  and its bytes). A flood costs the flooder its own events; a legitimate emitter that
  went over re-sends them once its acks stop coming. A lone producer (a benchmark, a
  re-send after a restart) takes all the daemon has: nobody waits behind it.

A new peer starts half full while the shared bucket has credit, else empty (during a
flood, a flooder gets no fresh credit by reconnecting; a trainer that connects then may
see its first frames dropped for a few seconds, and re-sends them). A lone producer's
charges do not touch the shared bucket. The table of buckets is
bounded (``MAX_PEERS``): rested buckets go first, then the least recently seen.
"""

from __future__ import annotations

import time
from typing import Callable

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

MAX_PEERS = 4096
ACTIVE_S = 5.0  # a peer that sent this recently still contends (one flood frame can take seconds)
MAX_DEBT_S = 2.0  # the most handler time a contending peer can owe
LIGHT = 0.1  # of a peer's rate and burst: what it may spend while the shared bucket is empty
RESTED = 0.75  # of its light allowance: a peer that kept this much never waits for the pool
# (a quarter, 0.05 s by default: a trainer's early refits; forty flooding connections keep it too)
# A frame handled within this is free: cheap frames keep ZeroMQ's round-robin quick (a
# trainer's one-event frames are never charged); what delays others is an expensive frame.
FREE_S = 0.0002


class PeerBuckets:
    """Compiled (``daemon/build.py``, inbound.pxd), the rates and the shared bucket are C
    doubles; the table is a plain dict in order of last use (a peer's entry is moved to
    its end at each frame)."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic,
                 max_peers: int = MAX_PEERS, total_rate: float | None = None) -> None:
        """``rate``: handler seconds a peer earns per second; ``burst``: the most it saves;
        ``total_rate``: what all contending peers earn together (default 3 x ``rate``).
        While that shared bucket is empty a peer goes on only within its *light*
        allowance, ``LIGHT`` of its own (a trainer's frames are mostly free)."""
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be > 0")
        self.rate, self.burst, self.clock, self.max_peers = rate, burst, clock, max_peers
        self.total_rate = total_rate or 3 * rate
        # the shared bucket, one second deep: its tokens, and when they were counted
        self._total_tokens, self._total_when = self.total_rate, clock()
        # what the light allowances of all peers spend together, one second deep: without
        # it, a thousand connections would each spend their own
        self._light_tokens, self._light_when = self.total_rate * LIGHT, clock()
        # peer -> (tokens, light tokens, when), in order of last use
        self._peers: dict[bytes | str, tuple[float, float, float]] = {}
        self.dropped_frames = 0
        self.dropped_bytes = 0

    @cython.locals(now=cython.double, total=cython.double, tokens=cython.double, light=cython.double,
                   when=cython.double, dt=cython.double)
    def take(self, peer, size: int, backlogged: bool = True) -> bool:
        """True when ``peer``'s next frame (``size`` bytes) may be handled, else False
        (counted). A peer is refused only while peers contend: ``backlogged`` (the
        handlers are behind) and another peer sent within ``ACTIVE_S``."""
        now = self.clock()
        total = self._refill_total(now)
        old = self._peers.pop(peer, None)
        if old is None:
            old = self._new(total, now)
        tokens, light, when = old
        dt = now - when
        tokens = min(self.burst, tokens + dt * self.rate)
        light = min(self.burst * LIGHT, light + dt * self.rate * LIGHT)
        self._peers[peer] = (tokens, light, now)
        if len(self._peers) > self.max_peers:
            self._evict(now)
        rested = light >= self.burst * LIGHT * RESTED   # it cost (next to) nothing lately
        if tokens > 0 and (total > 0 or (light > 0 and (rested or self._refill_light(now) > 0))):
            return True
        if not (backlogged and self._others_active(peer, now)):
            return True
        self.dropped_frames += 1
        self.dropped_bytes += size
        return False

    @cython.locals(now=cython.double, tokens=cython.double, light=cython.double, dt=cython.double,
                   lr=cython.double, own=cython.double, shared=cython.double, alone=cython.double,
                   rested=cython.double, pool=cython.double)
    def wait_s(self, peer) -> float:
        """Seconds until ``peer``'s next frame would be taken, were nobody else to spend
        meanwhile: a lower bound, the hint a refused frame's notice carries
        (drop_notice.py). The conditions of `take`, each solved for the time it needs."""
        entry = self._peers.get(peer)
        if entry is None:
            return 0.0
        tokens, light, when = entry
        now = self.clock()
        dt = max(0.0, now - when)
        lr = self.rate * LIGHT
        tokens, light = tokens + dt * self.rate, light + dt * lr
        own = max(0.0, -tokens / self.rate)
        shared = max(0.0, -self._refill_total(now) / self.total_rate)
        rested = max(0.0, (self.burst * LIGHT * RESTED - light) / lr)
        pool = max(0.0, -self._refill_light(now) / (self.total_rate * LIGHT))
        alone = max(max(0.0, -light / lr), min(rested, pool))   # within its light allowance
        return max(own, min(shared, alone))

    def _new(self, total: float, now: float) -> tuple[float, float, float]:
        """A new peer: half its credit while the shared bucket has some, else none (a
        flooder gets nothing by reconnecting during its flood)."""
        return (self.burst / 2, self.burst * LIGHT, now) if total > 0 else (0.0, 0.0, now)

    @cython.locals(seconds=cython.double, tokens=cython.double, light=cython.double, when=cython.double,
                   total=cython.double)
    def charge(self, peer, seconds: float, shared: float = 0.0) -> None:
        """``peer``'s frame took the handlers ``seconds`` (free up to ``FREE_S``), and the
        daemon ``shared`` more on top that no one peer caused (the garbage collector's
        pauses: the contending peers pay them together). A lone producer owes at most
        ``burst`` and leaves the shared bucket alone; a contending peer owes up to
        ``MAX_DEBT_S`` (one 10k-event frame is paid for)."""
        if peer not in self._peers:
            return
        if shared > 0:
            self._charge_shared(peer, shared)
        if seconds <= FREE_S:
            return
        tokens, light, when = self._peers[peer]
        if not self._others_active(peer, when):
            self._peers[peer] = (max(tokens - seconds, -self.burst), light, when)
            return
        self._peers[peer] = (max(tokens - seconds, -MAX_DEBT_S), max(light - seconds, -MAX_DEBT_S * LIGHT), when)
        if self._refill_total(when) <= 0:   # it went on within its light allowance: the pool pays too
            self._light_tokens = max(self._refill_light(when) - seconds, -MAX_DEBT_S * LIGHT)
            self._light_when = max(when, self._light_when)
        self._charge_shared(peer, seconds)

    @cython.locals(seconds=cython.double, total=cython.double, when=cython.double)
    def _charge_shared(self, peer, seconds: float) -> None:
        """The shared bucket pays ``seconds`` while peers contend."""
        when = self._peers[peer][2]
        if not self._others_active(peer, when):
            return
        total = self._refill_total(when)
        self._total_tokens = max(total - seconds, -MAX_DEBT_S)
        self._total_when = max(when, self._total_when)

    @cython.locals(now=cython.double, tokens=cython.double, depth=cython.double)
    def _refill_light(self, now: float) -> float:
        tokens, depth = self._light_tokens, self.total_rate * LIGHT
        if now > self._light_when:
            tokens = min(depth, tokens + (now - self._light_when) * depth)
            self._light_tokens, self._light_when = tokens, now
        return tokens

    @cython.locals(now=cython.double, tokens=cython.double)
    def _refill_total(self, now: float) -> float:
        tokens = self._total_tokens
        if now > self._total_when:
            tokens = min(self.total_rate, tokens + (now - self._total_when) * self.total_rate)
            self._total_tokens, self._total_when = tokens, now
        return tokens

    def contending(self, peer) -> bool:
        """Another peer than ``peer`` sent within ``ACTIVE_S``: a limit applies now."""
        return self._others_active(peer, self.clock())

    def _others_active(self, peer, now: float) -> bool:
        """Another peer sent within ``ACTIVE_S`` (the table is in order of last use)."""
        for other, (_tokens, _light, when) in reversed(self._peers.items()):
            if other != peer:
                return now - when < ACTIVE_S
        return False

    def _evict(self, now: float) -> None:
        rested = [p for p, (t, _l, w) in self._peers.items() if t + (now - w) * self.rate >= self.burst]
        for p in rested[: max(1, len(self._peers) - self.max_peers)]:
            del self._peers[p]
        while len(self._peers) > self.max_peers:
            del self._peers[next(iter(self._peers))]   # the least recently seen

    def __len__(self) -> int:
        return len(self._peers)


def rcvhwm(cfg) -> int:
    """Messages a connection's pipe may hold: its share of the byte budget, for
    ``max_connections`` open at once."""
    share = min(cfg.peer_queue_bytes, cfg.queue_bytes // cfg.max_connections)
    return max(1, share // cfg.max_frame_bytes)
