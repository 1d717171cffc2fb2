"""The ROUTER socket: bound on every configured endpoint, drained from the event loop.

A plain (synchronous) pyzmq socket whose file descriptor is registered with the
asyncio loop. ZeroMQ's FD is edge-triggered, so each wake-up drains up to
what is waiting for a bounded slice of time and reschedules itself: no
per-message future, which is what keeps ingest close to a raw receive loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from typing import Callable

import structlog
import zmq

from .config import ListenConfig
from .admission import key_principal
from .drop_notice import INTERVAL_S as NOTICE_INTERVAL_S, DropNotices
from .envelopes import Envelopes
from .errors import ConfigError
from .frame_backlog import FrameBacklog
from .gc_clock import GcClock
from .inbound import FREE_S, PeerBuckets, rcvhwm

log = structlog.get_logger("wtwind.receiver")
INF = float("inf")
JOURNAL_RETRY_S = 0.05  # a frame dropped for its client's alerts queued at the writer: send again after
DROPS_LOG_S = 60.0  # frames dropped unread are said in the log at most this often (`report_drops`)
# (identity, frame, user, deadline) -> the frame's rest or None: `user` is the CURVE key
# (None without user ids); the handler stops at `deadline` (perf_counter) and returns a
# callable `rest(deadline)` for what is left (frame_backlog.py)
Handler = Callable[..., object]


def secure_ipc_dir(folder: str) -> None:
    """The ipc socket's folder: created 0750 if missing; refused (ConfigError) when another
    user owns it, or when others may write into it without the sticky bit (they could
    replace the socket and receive the trainers' events)."""
    if not folder:
        return
    try:
        os.makedirs(folder, mode=0o750, exist_ok=True)
        st = os.stat(folder)
    except OSError as exc:
        raise ConfigError(f"listen.endpoints: cannot create {folder}: {exc.strerror}") from None
    if st.st_uid not in (os.getuid(), 0):
        raise ConfigError(f"listen.endpoints: {folder} belongs to uid {st.st_uid}, not to this user; "
                          "another user may have squatted it")
    if st.st_mode & 0o022 and not st.st_mode & 0o1000:
        raise ConfigError(f"listen.endpoints: {folder} is writable by others (mode "
                          f"{st.st_mode & 0o7777:o}); use a private folder such as /run/wtwind")


class Receiver:
    def __init__(self, cfg: ListenConfig, *, user_ids: bool = False, slice_s: float = 0.002,
                 ctx: zmq.Context | None = None) -> None:
        """``user_ids``: hand each frame's ZAP User-Id (the CURVE client's public key) to
        the handler: it is the principal runs are bound to (admission.py)."""
        self.cfg = cfg
        self.handler: Handler | None = None  # given by start(): the server's per-frame path
        self.slice_s = slice_s
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.buckets = PeerBuckets(cfg.peer_loop_share, cfg.peer_burst_s, total_rate=cfg.loop_share)
        # frames cut short by their slice, and what their peers sent after them
        self.backlog = FrameBacklog(max_bytes=cfg.queue_bytes // 4)
        self.backlog_frames = cfg.peer_queue_bytes // cfg.max_frame_bytes   # a peer's, behind its rest
        self.gc = GcClock()  # the collector's pauses: the daemon's cost, not the peer whose frame met one
        self._mark = (0.0, 0.0)  # (thread CPU, clock) at the start of the drain turn (`_timed`)
        self.connections = 0  # live, from the monitor (accepted - disconnected)
        self.hwm = rcvhwm(cfg)  # messages a connection's pipe holds, set once (inbound.py)
        self.sock.setsockopt(zmq.RCVHWM, self.hwm)
        self.sock.setsockopt(zmq.SNDHWM, 10_000)
        # a reply the peer's queue cannot take raises (EAGAIN / EHOSTUNREACH) instead of being
        # dropped in silence: every reply lost is counted (wtwind_replies_dropped_total)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.MAXMSGSIZE, cfg.max_frame_bytes + 1024)
        self.envelopes = Envelopes(self.sock)
        self.notices = DropNotices(self.send)   # a dropped frame's connection is told (drop_notice.py)
        self.send_dropped = 0
        self.disconnects = 0
        self._monitor: zmq.Socket | None = None
        self.bad_envelopes = 0
        self.handler_errors = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_pending = False
        # peers contend: the last drain ended with frames still waiting, or dropped one
        # (catching up by dropping a flood is no sign that the flood is over)
        self._backlogged = False
        self.user_ids = user_ids
        # client -> its alert transactions the store's writer has not committed
        # (``AlertPath.journaling``, shared by wiring.py); past ``journal_share`` of them, a
        # client's frames wait while another sends (``_journal_full``)
        self.journaling: dict = {}
        self.journal_share = 0
        self.journal_dropped = 0
        self.journal_dropped_bytes = 0
        self._drops_said: dict[str, int] = {}   # the drop counts the log last said, by reason
        self._drops_said_at = -INF

    def bind(self) -> None:
        for ep in self.cfg.endpoints:
            if ep.startswith("ipc://"):
                secure_ipc_dir(os.path.dirname(ep[len("ipc://"):]))
            try:
                self.sock.bind(ep)
            except zmq.ZMQError as exc:
                raise ConfigError(f"listen.endpoints: cannot bind {ep}: {exc.strerror}") from None
            if ep.startswith("ipc://"):
                self._secure_ipc(ep[len("ipc://"):])

    def _secure_ipc(self, path: str) -> None:
        os.chmod(path, int(self.cfg.ipc_mode, 8))
        if self.cfg.ipc_group:
            shutil.chown(path, group=self.cfg.ipc_group)

    def start(self, loop: asyncio.AbstractEventLoop, handler: Handler) -> None:
        """Frames go to ``handler`` from now on (the socket is bound already)."""
        self.handler = handler
        self._loop = loop
        self.gc.install()
        self._drain_pending = False
        loop.add_reader(self.sock.getsockopt(zmq.FD), self.drain)
        loop.call_soon(self.drain)
        # libzmq drops a peer whose message is over MAXMSGSIZE and tells the socket nothing
        # but a disconnect: counted here, with every other disconnect
        self._monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_ACCEPTED)
        loop.add_reader(self._monitor.getsockopt(zmq.FD), self.drain_monitor)

    def drain_monitor(self) -> None:
        """Connections come and go: count them, and say so in the log when more are open
        than the socket queues are sized for (``[listen] max_connections``: each one past
        it adds its pipe to ``queue_bytes``). The pipes are never resized (inbound.py)."""
        mon = self._monitor
        while mon is not None:
            try:
                parts = mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if int.from_bytes(parts[0][:2], "little") != zmq.EVENT_ACCEPTED:
                self.disconnects += 1
                self.connections = max(0, self.connections - 1)
                continue
            self.connections += 1
            if self.connections == self.cfg.max_connections + 1:   # once per crossing
                log.warning("connections_over_sizing", connections=self.connections,
                            max_connections=self.cfg.max_connections,
                            queue_bytes_now=self.connections * self.hwm * self.cfg.max_frame_bytes,
                            hint="raise [listen] max_connections and queue_bytes, or shard")

    def drain(self) -> int:
        """Handle what is waiting, for at most ``slice_s`` of loop time; returns the count.

        Time-bounded rather than count-bounded, so a burst of expensive events cannot
        starve the HTTP server, the tick or alert delivery: the rest is picked up on the
        next turn. The slice is short because an alert's delivery takes several loop
        turns (outbox read, the HTTP exchange, the outcome write); docs/BENCHMARKS.md has
        the measurements behind its value. A frame is handled up to the same deadline:
        what is left of it waits in `backlog` (frame_backlog.py), which takes the first
        half of each turn, one peer after another, before the socket's new frames.
        """
        handler, n = self.handler, 0
        if handler is None:  # not started: leave the frames queued in the socket
            return 0
        # (identity, frame), with CURVE on (identity, frame, User-Id): envelopes.py, C
        # calls where compiled; the User-Id goes to the handler and names the bucket
        with_user = self.user_ids
        nxt = self.envelopes.next_with_user if with_user else self.envelopes.next
        take, backlogged, clock = self.buckets.take, self._backlogged, time.perf_counter
        backlog, handle, journaling = self.backlog, self._handle, self.journaling
        dropped = self.buckets.dropped_frames + backlog.dropped_frames
        start = clock()
        deadline = start + self.slice_s
        self._mark = (time.thread_time(), start)   # for `_timed`: the loop thread's CPU from here
        if backlog:
            n += backlog.serve(start + self.slice_s / 2, self._resume, clock)
        while True:
            got = nxt()
            if got is None:
                self._backlogged = bool(backlog) or dropped != self.buckets.dropped_frames + backlog.dropped_frames
                if backlog:
                    self._schedule()
                return n
            n += 1
            identity, frame = got[0], got[1]
            if frame is None:  # more than one frame after the identity: not ours
                self.bad_envelopes += 1
                continue
            user = got[2] if with_user else None
            peer = user or identity  # with CURVE the bucket is the key's, however many connections
            if not take(peer, len(frame), backlogged):  # in debt while others wait
                self._refused(identity, peer)
                continue
            if journaling and self._journal_full(peer, identity, user, len(frame)):
                continue
            if peer in backlog:  # behind what it sent before: in its order
                if not backlog.queue(peer, identity, frame, user, self.backlog_frames) and self.notices.due(identity):
                    self.notices.tell(identity, NOTICE_INTERVAL_S)
                continue
            if handle(peer, identity, frame, user, deadline if backlog.has_room() else INF) > deadline:
                break
        self._backlogged = True
        self._schedule()
        return n

    def _handle(self, peer, identity: bytes, frame: bytes, user, deadline: float) -> float:
        """A new frame, up to ``deadline``, its rest parked; returns the clock after it."""
        rest, end = self._timed(peer, self.handler, identity, frame, user, deadline)
        if rest is not None:
            self.backlog.park(peer, rest)
        return end

    def _journal_full(self, peer, identity: bytes, user, size: int) -> bool:
        """The frame's client has ``journal_share`` alerts waiting for the store's writer
        and another client sends: the frame is dropped unread (counted, its connection
        told to send again in ``JOURNAL_RETRY_S``), so that no client queues more of the
        writer's time than that ahead of another's page (alert_path.py). The client is
        the one runs are charged to (admission.py): the CURVE principal, else the
        connection."""
        who = key_principal(user) if user else identity    # as Admission._create charges runs
        if self.journaling.get(who, 0) < self.journal_share or not self.buckets.contending(peer):
            return False
        self.journal_dropped += 1
        self.journal_dropped_bytes += size
        if self.notices.due(identity):
            self.notices.tell(identity, JOURNAL_RETRY_S)
        return True

    def _resume(self, peer, item, deadline: float):
        """A parked item, up to ``deadline``: the rest of a frame (a callable, paid for
        already: it goes on), or a frame that waited behind one (its peer's bucket is
        asked again: its credit may have gone into the rest). Returns what is left."""
        if callable(item):
            return self._timed(peer, item, deadline)[0]
        identity, frame, user = item
        if not self.buckets.take(peer, len(frame), True):
            self._refused(identity, peer)
            return None
        return self._timed(peer, self.handler, identity, frame, user, deadline)[0]

    def _refused(self, identity: bytes, peer) -> None:
        """``peer``'s bucket refused a frame from ``identity``: its emitter is told when to
        send it again (at most once per ``NOTICE_INTERVAL_S``)."""
        if self.notices.due(identity):
            self.notices.tell(identity, self.buckets.wait_s(peer))

    def _timed(self, peer, call, *args) -> tuple:
        """``call(*args)`` charged to ``peer``'s bucket: (its return, the clock after it).

        The charge is the frame's wall time, GIL waits included: a new run's alert costs
        the store's writer thread more than the handler, and the writer takes the GIL
        from the loop while the frame waits (charged by the thread's CPU time instead, the
        all-at-once flood took 8x more of the loop and the legitimate page came 14-24 s
        late). But a frame on which the loop's thread itself spent under ``FREE_S`` is
        free however long it waited: a trainer's one-event frame that met the writer or
        another process on the core is not its trainer's debt. The thread's CPU is read
        only for a frame whose wall time is over ``FREE_S``: a lower bound of its own,
        the CPU since the turn's mark less the wall time of everything else since.
        The garbage collector's pauses are taken out and paid by all contending peers
        together: one peer's frame did not make it collect."""
        clock, gc = time.perf_counter, self.gc
        start, paused, rest = clock(), gc.seconds, None
        try:
            rest = call(*args)
        except Exception:  # task boundary: count, log the traceback, keep serving
            self.handler_errors += 1
            log.exception("frame_handler_failed")
        end = clock()
        paused = gc.seconds - paused
        spent = end - start - paused
        if spent > FREE_S:
            cpu, (cpu0, t0) = time.thread_time(), self._mark
            if (cpu - cpu0) - (end - t0 - (end - start)) - paused <= FREE_S:
                spent = 0.0   # it waited: its own work was next to nothing
            self._mark = (cpu, end)
        self.buckets.charge(peer, spent, paused)
        return rest, end

    def _schedule(self) -> None:
        """At most one drain pending on the loop, however many sends asked for one."""
        if self._loop is not None and not self._drain_pending:
            self._drain_pending = True
            self._loop.call_soon(self._scheduled_drain)

    def _scheduled_drain(self) -> None:
        self._drain_pending = False
        self.drain()

    def send(self, identity: bytes, frame: bytes) -> bool:
        try:
            self.sock.send_multipart([identity, frame], zmq.NOBLOCK)
        except zmq.ZMQError:
            self.send_dropped += 1
            return False
        self._schedule()  # a send can consume the FD's edge: look again
        return True

    def drops(self) -> dict[str, int]:
        """Frames dropped unread so far, by ``wtwind_frames_dropped_total``'s reason."""
        return {"peer_rate": self.buckets.dropped_frames, "peer_backlog": self.backlog.dropped_frames,
                "journal_backlog": self.journal_dropped}

    def report_drops(self, now: float) -> None:
        """Say in the log, one warning at most every ``DROPS_LOG_S``, how many frames were
        dropped unread since it last did, by reason (each connection was told already; the
        counters are on /metrics): an operator reading the log sees a flood, or a trainer
        over its share, without a dashboard."""
        if now - self._drops_said_at < DROPS_LOG_S:
            return
        counts = self.drops()
        new = {k: n - self._drops_said.get(k, 0) for k, n in counts.items() if n > self._drops_said.get(k, 0)}
        if not new:
            return
        since = None if self._drops_said_at == -INF else round(now - self._drops_said_at)
        self._drops_said, self._drops_said_at = counts, now
        log.warning("frames_dropped", **new, since_s=since,
                    hint="clients sent past their share while others waited; each connection was told "
                         "to send again (wtwind_frames_dropped_total by reason, docs/SECURITY.md)")

    def describe(self):
        from .described import described

        return described(
            counters=("wtwind_frames_bad_envelope", "wtwind_frame_handler_errors",
                      "wtwind_peer_disconnects", "wtwind_frames_dropped", "wtwind_frames_dropped_bytes",
                      "wtwind_replies_dropped", "wtwind_gc_seconds", "wtwind_drop_notices"),
            gauges=("wtwind_receive_connections", "wtwind_receive_queue_messages",
                    "wtwind_receive_queue_limit_bytes"))

    def collect(self):
        """The socket's error counters (registered on the daemon's registry)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield CounterMetricFamily("wtwind_frames_bad_envelope",
                                  "ZeroMQ messages that were not one identity and one frame",
                                  value=self.bad_envelopes)
        yield CounterMetricFamily("wtwind_frame_handler_errors",
                                  "Frames whose handling raised (logged with the traceback)",
                                  value=self.handler_errors)
        yield CounterMetricFamily("wtwind_peer_disconnects",
                                  "Client connections dropped: peers that went away, and peers libzmq "
                                  "cut for a message over listen.max_frame_bytes", value=self.disconnects)
        dropped = CounterMetricFamily("wtwind_frames_dropped", "Frames dropped before decoding: "
                                      "their peer had spent its [listen] peer_loop_share while others waited "
                                      "(peer_rate), had a full queue behind a frame cut short (peer_backlog), or had "
                                      "[alert_path] JOURNAL_SHARE alerts waiting for the store (journal_backlog)",
                                      labels=["reason"])
        for reason, n in self.drops().items():
            dropped.add_metric([reason], n)
        yield dropped
        yield CounterMetricFamily("wtwind_frames_dropped_bytes", "Bytes of the frames dropped before decoding",
                                  value=self.buckets.dropped_bytes + self.backlog.dropped_bytes
                                  + self.journal_dropped_bytes)
        yield GaugeMetricFamily("wtwind_receive_connections", "Client connections open", value=self.connections)
        yield GaugeMetricFamily("wtwind_receive_queue_messages",
                                "Messages the next connection's socket queue may hold ([listen] "
                                "peer_queue_bytes and queue_bytes over max_frame_bytes)", value=self.hwm)
        yield GaugeMetricFamily("wtwind_receive_queue_limit_bytes",
                                "Bytes the open connections' socket queues may hold at most, as sized now",
                                value=max(1, self.connections) * self.hwm * self.cfg.max_frame_bytes)
        family = CounterMetricFamily("wtwind_gc_seconds", "Seconds Python's cyclic garbage collector "
                                     "held the daemon, by generation (2: a full collection)",
                                     labels=["generation"])
        for generation, seconds in enumerate(self.gc.by_generation):
            family.add_metric([str(generation)], seconds)
        yield family
        yield CounterMetricFamily("wtwind_drop_notices", "Replies telling a connection that its frame was "
                                  "dropped unread, so that its emitter re-sends it (at most one per "
                                  "connection per 0.1 s)", value=self.notices.sent)
        yield CounterMetricFamily("wtwind_replies_dropped",
                                  "Replies (acks, alerts, errors) not sent: the peer's queue was full",
                                  value=self.send_dropped)

    def close(self) -> None:
        self.gc.close()
        mon = self._monitor
        if self._loop is not None:
            try:
                self._loop.remove_reader(self.sock.getsockopt(zmq.FD))
                if mon is not None:
                    self._loop.remove_reader(mon.getsockopt(zmq.FD))
            except (ValueError, zmq.ZMQError):
                pass
        if mon is not None:
            self._monitor = None
            try:
                self.sock.disable_monitor()
            except zmq.ZMQError:
                pass
            mon.close(linger=0)
        self.envelopes.close()
        self.sock.close(linger=0)
        for ep in self.cfg.endpoints:
            if ep.startswith("ipc://"):
                try:
                    os.unlink(ep[len("ipc://"):])
                except OSError:
                    pass
