"""A frame dropped unread is told to its connection, and the emitter re-sends it at once.

Before, a trainer whose frame its bucket refused learnt of the loss from a later frame's
gap (a nack), or, when the dropped frame was its last (a NaN, then nothing), only at its
ack timeout: the page came 4-6 s late under `tests/bench/attacks.py`'s `emitters` and
`paced` floods. Both halves are tested over real ZeroMQ sockets: the daemon's receiver
refusing a peer in debt, and the real emitter against a socket that plays the daemon.
"""

from __future__ import annotations

import collections
import time

import msgpack
import pytest
import zmq

from helpers import raw_dealer, wait_for
from wtwin.daemon.config import ListenConfig
from wtwin.daemon.drop_notice import INTERVAL_S, MAX_ENTRIES, DropNotices
from wtwin.emitters import connect, wire
from wtwin.emitters.resend import MAX_RETRY_S, ResendBuffer


class TestNotices:
    def test_one_notice_per_connection_per_interval_from_a_bounded_table(self):
        now, sent = [100.0], []
        notices = DropNotices(lambda identity, frame: sent.append((identity, msgpack.unpackb(frame))) or True,
                              clock=lambda: now[0])
        for _ in range(5):
            if notices.due(b"a"):
                notices.tell(b"a", 0.25)
        assert [(i, m["type"], m["retry_s"]) for i, m in sent] == [(b"a", "dropped", 0.25)]
        now[0] += INTERVAL_S * 1.01
        assert notices.due(b"a") and not notices.due(b"a")
        for k in range(MAX_ENTRIES + 10):
            notices.due(b"peer-%d" % k)
        assert len(notices._told) == MAX_ENTRIES
        assert notices.sent == 1


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_receiver_tells_a_refused_connection_when_to_send_again(tmp_path):
    """Two connections whose frames each cost the handler 20 ms, on small shares: the
    receiver refuses frames of the peer in debt, and that connection gets a ``dropped``
    reply with the wait its bucket needs, at most one per ``INTERVAL_S``."""
    from wtwin.daemon.receiver import Receiver

    endpoint = f"ipc://{tmp_path}/n.sock"
    rx = Receiver(ListenConfig(endpoints=(endpoint,), peer_loop_share=0.02, peer_burst_s=0.05,
                               loop_share=0.04), ctx=zmq.Context.instance())
    rx.bind()
    rx.handler = lambda identity, frame, user, deadline: _burn(0.02)
    flood, trainer = raw_dealer(endpoint), raw_dealer(endpoint)
    notices: list[dict] = []

    def told() -> bool:
        while trainer.poll(0):
            notices.append(msgpack.unpackb(trainer.recv()))
        return bool(notices)

    try:
        def offer() -> bool:
            for _ in range(5):
                flood.send(b"flood frame")
            trainer.send(b"trainer frame")
            rx.drain()
            return told()

        wait_for(offer, 60, 0.001, "a dropped reply to the trainer's connection")
        assert notices[0]["type"] == "dropped"
        assert 0 < notices[0]["retry_s"] <= 10
        assert rx.buckets.dropped_frames >= len(notices)
        assert rx.notices.sent >= len(notices)
    finally:
        flood.close(linger=0)
        trainer.close(linger=0)
        rx.close()


class TestEmitterHalf:
    def test_a_dropped_reply_resends_the_newest_frame_and_honours_the_next_nack(self):
        buf = ResendBuffer(100, ack_timeout_s=3600, stats=collections.Counter())
        buf.hold([{"seq": 1}, {"seq": 2}])
        buf.hold([{"seq": 3}])
        assert buf.due() == -1
        buf.on_dropped(0.0)
        wait_for(lambda: buf.due() == 2, 5, 0.001, "the newest frame due again")
        assert buf.take_after(2) == [{"seq": 3}]
        assert buf.due() == -1
        buf.hold([{"seq": 3}])
        # a nack for a gap just re-sent is ignored (the re-send is on its way) ...
        assert buf.on_ack(2, resend=True) is False
        # ... unless the daemon said since that it dropped a frame: the re-send may be it
        buf.on_dropped(0.0)
        assert buf.on_ack(2, resend=True) is True

    @pytest.mark.parametrize("retry", [None, "soon", float("nan"), True, -5.0, 1e9])
    def test_a_hostile_retry_is_clamped(self, retry):
        buf = ResendBuffer(100, ack_timeout_s=3600, stats=collections.Counter())
        buf.hold([{"seq": 1}])
        before = time.monotonic()
        buf.on_dropped(retry)
        assert before <= buf._probe_at <= time.monotonic() + MAX_RETRY_S

    def test_the_emitter_resends_its_last_frame_when_told_it_was_dropped(self, tmp_path):
        """A socket plays the daemon: it drops the frame with the NaN unread and says so.
        The ack timeout is an hour, so only the notice can bring the NaN back."""
        with FakeDaemon(tmp_path) as fake:
            em = connect(fake.endpoint, run="r", heartbeat_s=3600, ack_timeout_s=3600, secret_dir=tmp_path)
            try:
                em.loss(1, 2.0)
                wait_for(lambda: fake.with_step(1), 30, 0.01, "the first loss")
                em.loss(2, float("nan"))
                wait_for(lambda: fake.with_step(2) == 1, 30, 0.01, "the NaN")
                fake.reply(wire.reply("dropped", retry_s=0.05))
                wait_for(lambda: fake.with_step(2) == 2, 30, 0.01, "the NaN sent again")
                assert em.stats["dropped_by_daemon"] == 1
                assert fake.steps(fake.frames()[-1]) == [2]   # the newest frame only
            finally:
                em.close(timeout=0.5)

    def test_at_the_ack_timeout_the_newest_frame_probes_and_a_nack_gets_the_rest(self, tmp_path):
        """Acks stop coming: the emitter re-sends its newest frame, not all it holds (a
        daemon that has everything and is only slow to commit gets one duplicate); the
        daemon's nack for the gap before it then brings the rest, in order."""
        with FakeDaemon(tmp_path) as fake:
            em = connect(fake.endpoint, run="r", heartbeat_s=3600, ack_timeout_s=0.3, secret_dir=tmp_path)
            try:
                em.loss(1, 2.0)
                wait_for(lambda: fake.with_step(1), 30, 0.01, "the first loss")
                fake.reply(wire.reply("ack", seq=0, emitter=em.id))   # acks exist, then stop
                for step in range(2, 6):
                    em.loss(step, 2.0)
                    wait_for(lambda: fake.with_step(step), 30, 0.01, f"step {step}")
                wait_for(lambda: fake.with_step(5) == 2, 30, 0.01, "the probe")
                # each timeout sent the newest frame then (a timeout may come between sends);
                # the run_start goes alone when the trainer is slower to its first loss
                assert all(len(fake.steps(events)) <= 1 for events in fake.frames())
                seq_of_1 = next(e["seq"] for ev in fake.frames() for e in ev if e.get("step") == 1)
                fake.reply(wire.reply("ack", seq=seq_of_1, emitter=em.id, resend=True))
                wait_for(lambda: fake.with_step(2) == 2, 30, 0.01, "the re-send the nack asked for")
                assert fake.steps(fake.frames()[-1]) == [2, 3, 4, 5]
            finally:
                em.close(timeout=0.5)


class FakeDaemon:
    """A ROUTER socket in the daemon's place: it records the frames, and replies to the
    connection that sent the last one."""

    def __init__(self, tmp_path) -> None:
        self.endpoint = f"ipc://{tmp_path}/fake.sock"
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.endpoint)
        self.seen: list[tuple[bytes, list[dict]]] = []

    def __enter__(self) -> "FakeDaemon":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def frames(self) -> list[list[dict]]:
        while self.sock.poll(0):
            identity, frame = self.sock.recv_multipart()
            msg = wire.unpack(frame)
            self.seen.append((identity, msg.get("events", [msg])))
        return [events for _, events in self.seen]

    @staticmethod
    def steps(events: list[dict]) -> list[int]:
        return [e["step"] for e in events if e.get("type") == "loss"]

    def with_step(self, step: int) -> int:
        """How many frames carried the loss of ``step``."""
        return sum(step in self.steps(events) for events in self.frames())

    def reply(self, frame: bytes) -> None:
        self.sock.send_multipart([self.seen[-1][0], frame])
