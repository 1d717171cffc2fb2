"""The trainer-side emitter: one DEALER socket on a background I/O thread.

The caller's thread only appends a small tuple to a bounded deque (no encoding, no
conversion, no syscalls), so ``emit.loss()`` costs about a microsecond and never
blocks or raises. The I/O thread converts values (``float()`` works for Python
floats, numpy scalars and 0-d torch tensors, without importing either), assigns the
per-emitter ``seq``, batches whatever has queued up, and sends without blocking.
Replies from the daemon (alerts, projection_ready) are queued back and handed to
``on_alert`` / ``on_projection`` on the caller's thread at its next emit or ``poll()``.

Acknowledged delivery (docs/RELIABILITY.md): sent events stay in a bounded resend
buffer (``resend_size``, ``resend.py``) until the daemon acks their ``seq`` (it does
once their effects are persisted). Each frame carries ``base``, the oldest seq still
held. What is held goes again, in order, when the daemon asks (an ack with ``resend``:
a gap this emitter can fill; a ``dropped`` reply: a frame it dropped unread, the newest
is re-sent) or no ack progresses for ``ack_timeout_s``; the daemon drops what it has by
seq. All on the I/O thread. The daemon's half is ``wtwin.daemon.emitter_link``, whose
docstring describes both halves side by side.

Several endpoints (``WTWIN_ENDPOINT`` or ``endpoint=`` holding a list) are shards: the
run's name picks one once, at construction, by rendezvous hashing (``shards.py``,
docs/SHARDING.md), and everything the emitter sends goes there; ``endpoint`` is that
pick, ``endpoints`` the list.

A daemon that does not answer is said once in the trainer's log (``reach.py``): nothing
acked for ``warn_unacked_s`` while events wait, with the endpoint, and again when acks
come back; ``stats`` has ``unreachable`` and ``no_ack_s``.

Beside it: the default endpoint (`endpoints.py`), the socket (`dealer.py`), the resend
buffer (`resend.py`), the event builders (`events.py`), the no-op emitter (`null.py`),
the run secret (`run_secret.py`), the unreachable-daemon warning (`reach.py`), the
shard pick (`shards.py`) and the wire format (`wire.py`).
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
import uuid
from typing import Any, Callable, Sequence

import zmq

from . import run_secret, shards, wire
from .dealer import open_dealer
from .endpoints import default_endpoint
from .events import BUILDERS
from .reach import Reach
from .resend import ResendBuffer
from .settings import EmitterSettings

class Emitter:
    """Publishes one run's events to wtwind. Use ``wtwin.emitters.connect()``."""

    def __init__(self, endpoint: str | Sequence[str] | None = None, run: str | None = None, *,
                 on_alert: Callable[[dict], Any] | None = None,
                 on_projection: Callable[[dict], Any] | None = None, **options) -> None:
        """``options`` are `EmitterSettings`' fields (``queue_size=``, ``secret=``, ...)."""
        self._start(EmitterSettings.of(endpoint, run, **options), on_alert, on_projection)

    @classmethod
    def from_settings(cls, settings: EmitterSettings, *,
                      on_alert: Callable[[dict], Any] | None = None,
                      on_projection: Callable[[dict], Any] | None = None) -> "Emitter":
        emitter = cls.__new__(cls)
        emitter._start(settings, on_alert, on_projection)
        return emitter

    def _start(self, settings: EmitterSettings, on_alert, on_projection) -> None:
        self.settings = s = settings
        self.run = s.run or f"run-{uuid.uuid4().hex[:8]}"
        self.id = uuid.uuid4().hex[:16]
        self.on_alert = on_alert
        self.on_projection = on_projection
        self._route(s)
        self._queues(s)
        self._authenticate(s)
        self._q.append(("run_start", time.time(), s.run_start()))
        self._thread = threading.Thread(target=self._io_main, name="wtwin-emitter", daemon=True)
        self._thread.start()

    def _route(self, s: EmitterSettings) -> None:
        """Several endpoints are shards: the run's name picks one, the same in every process."""
        self.endpoints = shards.parse(s.endpoint or s.endpoints or default_endpoint())
        self.endpoint = shards.pick(self.run, self.endpoints)
        self._reach = Reach(self.endpoint if len(self.endpoints) == 1 else
                            f"{self.endpoint} (this run's shard, 1 of {len(self.endpoints)})",
                            s.warn_unacked_s)

    def _queues(self, s: EmitterSettings) -> None:
        """The caller's queue, the daemon's replies, the frames being sent and the resend buffer."""
        self._q: collections.deque = collections.deque()
        self._maxq = s.queue_size  # read on the caller's thread, at every emit
        self._inbox: collections.deque = collections.deque()
        self._pending: collections.deque = collections.deque()  # [events, frame | None]
        self._idle = threading.Event()
        self._idle_at = 0.0
        self._close_wait = s.linger_ms / 1000
        self._dropped = 0
        self._stats = collections.Counter()
        self._held = ResendBuffer(s.resend_size, s.ack_timeout_s, self._stats)
        self._seq = 0
        self._last_sent = 0  # highest seq sent
        self._closing = threading.Event()
        self._closed = False
        self.errors: collections.deque = collections.deque(maxlen=16)  # the daemon's error replies

    def _authenticate(self, s: EmitterSettings) -> None:
        """The run's secret; a generated run id is never resumed, so its secret need not
        outlive the process."""
        self._secret_at = ("the secret= argument" if s.secret
                           else run_secret.where(self.run, s.secret_dir))
        self._secret = s.secret or (self._load_secret(s.secret_dir) if s.run
                                    else secrets.token_urlsafe(32))

    def _load_secret(self, directory) -> str | None:
        """The run's secret (emitters/run_secret.py): what lets a resumed trainer, and only
        it, go on writing this run. Never raises: without one the daemon refuses the run's
        events with an error reply, which ``errors`` and ``stats`` show."""
        try:
            return run_secret.load_or_create(self.run, directory)
        except (OSError, UnicodeDecodeError):
            self._stats["secret_errors"] += 1
            return None

    # ---- caller's thread: cheap, never raises, never blocks ---------------------------
    def _put(self, item: tuple) -> None:
        if self._inbox:
            self.poll()
        if len(self._q) >= self._maxq or self._closed:
            self._dropped += 1
            return
        self._q.append(item)

    def loss(self, step, loss, lr=None, grad_norm=None, **extra) -> None:
        self._put(("loss", time.time(), step, loss, lr, grad_norm, extra))

    def eval(self, step, **metrics) -> None:
        self._put(("eval", time.time(), step, metrics))

    def scalar(self, step, name, value) -> None:
        """Any other number the trainer logs, charted on the run page under ``name``
        (1..64 letters, digits or ``_./-:``; a bad name is counted ``invalid``)."""
        self._put(("scalar", time.time(), step, name, value))

    def checkpoint(self, step, path, *, format: str = "torch", epoch=None,
                   want=("analyze",)) -> None:
        self._put(("checkpoint", time.time(), step, path, format, epoch, want))

    def heartbeat(self) -> None:
        self._put(("heartbeat", time.time()))

    def rewind(self, step, from_step, **fields) -> None:
        """The audit record of a `Rewind`: back from ``from_step`` to ``step``."""
        self._put(("rewind", time.time(), step, from_step, fields))

    def poll(self) -> int:
        """Run pending daemon callbacks on this thread; returns how many ran."""
        n = 0
        while self._inbox:
            msg = self._inbox.popleft()
            cb = self.on_projection if msg.get("type") == "projection_ready" else self.on_alert
            n += 1
            if cb is None:
                continue
            try:
                cb(msg)
            except Exception:  # a user callback must not kill the training loop
                self._stats["callback_errors"] += 1
        return n

    @property
    def stats(self) -> dict[str, int]:
        s = dict(self._stats)
        s["dropped"] = self._dropped + s.get("dropped_io", 0)
        s["queued"] = len(self._q) + sum(len(p[0]) for p in self._pending)
        s["unacked"] = len(self._held.unacked)
        s["acked"] = self._held.acked
        s["unreachable"] = int(self._reach.unreachable)
        s["no_ack_s"] = int(self._reach.silent_s(time.monotonic()))
        return s

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything emitted so far is acked (sent, with ``resend_size=0``).

        Returns False at ``timeout`` (a daemon that is down, or one that never acks)."""
        start = time.monotonic()
        deadline = start + timeout
        while self._idle_at <= start:  # idle as seen by the I/O thread after this call began
            if time.monotonic() >= deadline or not self._thread.is_alive():
                return False
            self._idle.clear()
            self._idle.wait(0.01)
        return True

    def _is_idle(self) -> bool:
        return not self._q and not self._pending and not self._held.unacked

    def close(self, status: str = "completed", timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._q.append(("run_end", time.time(), status))
        self._closed = True
        self._close_wait = max(self.settings.linger_ms / 1000, timeout - 0.5)  # for acks, if any
        self._closing.set()
        self._thread.join(timeout)
        self.poll()

    def __enter__(self) -> "Emitter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("completed" if exc_type is None else "failed")

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._closing.set()
        except Exception:
            pass

    # ---- I/O thread ---------------------------------------------------------------------
    def _io_main(self) -> None:
        sock = open_dealer(self.endpoint, self.settings.linger_ms, self.settings.curve, self._stats)
        if sock is None:
            self._drain_forever_without_socket()
            return
        try:
            self._loop(sock)
        finally:
            sock.close(linger=self.settings.linger_ms)

    def _drain_forever_without_socket(self) -> None:
        while not self._closing.wait(0.05):
            self._dropped += len(self._q)
            self._q.clear()

    def _loop(self, sock) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        next_hb = time.monotonic() + self.settings.heartbeat_s
        while True:
            closing = self._closing.is_set()
            self._pack_queue()
            self._flush(sock)
            if closing and not self._q:
                self._final_flush(sock, poller)
                return
            if time.monotonic() >= next_hb:
                next_hb = time.monotonic() + self.settings.heartbeat_s
                self._q.append(("heartbeat", time.time()))
            self._check_resend()
            self._reach.check(time.monotonic(), self._last_sent - self._held.acked)
            if self._is_idle():  # judged here, on the thread that moves events around
                self._idle_at = time.monotonic()
                self._idle.set()
            for s, _ in poller.poll(2 if self._q or self._pending else 10):
                self._receive(s)

    def _final_flush(self, sock, poller) -> None:
        wait = self._close_wait if self._held.ack_seen else self.settings.linger_ms / 1000
        deadline = time.monotonic() + wait
        while not self._is_idle() and time.monotonic() < deadline:
            self._check_resend()
            self._flush(sock)
            for s, _ in poller.poll(5):
                self._receive(s)
        for events, _ in self._pending:
            self._stats["dropped_io"] += len(events)
        self._pending.clear()
        if self._held.ack_seen and self._held.unacked:  # sent, but the daemon never confirmed them
            self._stats["unacked_at_close"] += len(self._held.unacked)
        if not self._held.ack_seen:
            self._reach.closing(time.monotonic(), self._last_sent - self._held.acked)

    def _pack_queue(self) -> None:
        while self._q:
            events = []
            while self._q and len(events) < self.settings.batch_max:
                ev = self._to_event(self._q.popleft())
                if ev is not None:
                    events.append(ev)
            if not events:
                continue
            self._pending.append([events, None])
            self._bound_pending()
            time.sleep(0)  # hand the GIL back to the training thread between batches

    def _bound_pending(self) -> None:
        """Drop the oldest unsent frames past the bound, but never the run's ``run_start``:
        it moves to the front of the next frame (seq order kept), so the config survives."""
        total = sum(len(p[0]) for p in self._pending)
        while total > self.settings.queue_size and len(self._pending) > 1:
            events, _ = self._pending.popleft()
            keep = [e for e in events if e["type"] == "run_start"]
            total -= len(events) - len(keep)
            self._stats["dropped_io"] += len(events) - len(keep)
            if keep:
                nxt = self._pending[0]
                nxt[0][:0] = keep
                nxt[1] = None  # re-encode with the carried event

    def _encode(self, events: list) -> bytes:
        """Encoded at send time, so ``base`` (the oldest seq still held) is current."""
        if self._held.size == 0:
            if len(events) == 1:
                return wire.encode({**events[0], "auth": self._secret} if self._secret else events[0])
            return wire.encode_batch(events, self.id, auth=self._secret)
        held = self._held.unacked[0] if self._held.unacked else events[0]
        return wire.encode_batch(events, self.id, base=held["seq"], auth=self._secret)

    def _flush(self, sock) -> None:
        while self._pending:
            item = self._pending[0]
            if item[1] is None:
                item[1] = self._encode(item[0])
            try:
                sock.send(item[1], zmq.NOBLOCK)
            except zmq.Again:
                self._stats["send_blocked"] += 1
                return
            except zmq.ZMQError:
                self._stats["send_errors"] += 1
                return
            self._pending.popleft()
            self._stats["sent"] += len(item[0])
            self._last_sent = max(self._last_sent, item[0][-1]["seq"])
            self._reach.sent(time.monotonic())
            if self._held.size:
                self._held.hold(item[0])

    # ---- acknowledged delivery (I/O thread; the buffer is resend.py) -------------------
    def _on_ack(self, msg: dict) -> None:
        seq = msg.get("seq")
        if type(seq) is not int:
            self._stats["bad_replies"] += 1
            return
        self._reach.heard(time.monotonic(), all_acked=seq >= self._last_sent)
        if self._held.on_ack(seq, bool(msg.get("resend"))):
            self._resend(seq)

    def _check_resend(self) -> None:
        after = self._held.due()   # the ack timeout, or the daemon's word of a dropped frame
        if after >= 0:
            self._resend(after)

    def _resend(self, after: int) -> None:
        """Everything held with seq > ``after`` goes out again, in seq order, first."""
        events = self._held.take_after(after)
        for pending_events, _ in self._pending:
            events.extend(e for e in pending_events if e["seq"] > after)
        self._pending.clear()
        for i in range(0, len(events), self.settings.batch_max):
            self._pending.append([events[i:i + self.settings.batch_max], None])
        self._stats["resends"] += 1
        self._stats["resent_events"] += len(events)

    def _receive(self, sock) -> None:
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = wire.unpack(frame)
            except wire.WireError:
                self._stats["bad_replies"] += 1
                continue
            if type(msg) is not dict:
                continue
            kind = msg.get("type")
            if kind == "ack":
                self._on_ack(msg)
            elif kind == "dropped":
                self._held.on_dropped(msg.get("retry_s"))
            elif kind == "error":  # the daemon refused something: counted, kept for the caller
                reason = msg.get("reason")
                self._stats[f"error_{reason if reason in wire.ERROR_REASONS else 'other'}"] += 1
                self.errors.append(msg)
                self._reach.refused(msg, self._secret_at)  # once per reason, in words
            elif kind in ("alert", "projection_ready"):
                self._stats["alerts_received" if kind == "alert" else "projections_received"] += 1
                self._inbox.append(msg)

    def _to_event(self, item: tuple) -> dict | None:
        try:
            ev = BUILDERS[item[0]](item)
        except Exception:  # a value float()/int() cannot convert: counted, dropped
            self._stats["invalid"] += 1
            return None
        ev["v"] = wire.VERSION
        ev["run"] = self.run
        ev["emitter"] = self.id
        self._seq += 1
        ev["seq"] = self._seq
        if item[0] == "heartbeat":
            ev["dropped"] = self._dropped + self._stats.get("dropped_io", 0)
        return ev
