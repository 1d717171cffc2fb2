"""The emitter link (daemon/emitter_link.py) on real ZeroMQ sockets, alone and facing the
real trainer-side `Emitter`: seq admission, nacks, acks, both halves of the protocol."""

from __future__ import annotations

import time

import pytest
import zmq

from helpers import admit_seq, wait_for
from wtwin.daemon.emitter_link import NACK_INTERVAL_S, EmitterLink
from wtwin.daemon.run_state import RunState
from wtwin.daemon.stats import Stats
from wtwin.emitters import wire
from wtwin.emitters.emitter import Emitter


@pytest.fixture
def pair(tmp_path):
    """A bound ROUTER and a DEALER connected to it (the trainer's side of the wire)."""
    ctx = zmq.Context.instance()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for s in (router, dealer):
        s.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path}/link.sock"
    router.bind(endpoint)
    dealer.connect(endpoint)
    yield router, dealer, endpoint
    router.close()
    dealer.close()


def send(router):
    def go(identity: bytes, frame: bytes) -> bool:
        router.send_multipart([identity, frame], zmq.NOBLOCK)
        return True
    return go


def deliver(router, dealer, frame: bytes) -> tuple[bytes, list[dict]]:
    """Send ``frame`` from the dealer; the router's (identity, decoded events)."""
    dealer.send(frame)
    assert router.poll(5000), "the frame never arrived"
    identity, raw = router.recv_multipart()
    events, rejects = wire.decode(raw)
    assert rejects == []
    return identity, events


def replies(dealer, timeout_ms: int = 200) -> list[dict]:
    out = []
    while dealer.poll(timeout_ms):
        out.append(wire.unpack(dealer.recv()))
        timeout_ms = 50
    return out


def events(seqs, base=None) -> bytes:
    evs = [{"v": 1, "type": "loss", "run": "r", "seq": s, "step": s, "loss": 2.0} for s in seqs]
    return wire.encode_batch(evs, "em-1", base=base)


class TestAdmission:
    def _admit(self, link, run, router, dealer, frame) -> list[int]:
        identity, evs = deliver(router, dealer, frame)
        return [ev["seq"] for ev in evs if admit_seq(link, run, ev, identity, time.time())]

    def test_in_order_events_move_the_mark_and_duplicates_are_dropped(self, pair):
        """seq = hwm + 1 is admitted; a re-send of seqs already processed is dropped, counted."""
        router, dealer, _ = pair
        stats, run = Stats(), RunState("r", preset="pretraining", cooldown_s=0.0, now=0.0)
        link = EmitterLink(stats, send(router))
        assert self._admit(link, run, router, dealer, events(range(1, 6), base=1)) == [1, 2, 3, 4, 5]
        assert self._admit(link, run, router, dealer, events(range(3, 9), base=1)) == [6, 7, 8]
        assert run.marks.hwm == {"em-1": 8}
        assert stats.dropped["duplicate"] == 3
        assert replies(dealer) == []  # admission alone acks nothing: acks follow a commit

    def test_a_gap_the_emitter_still_holds_is_nacked_once_a_second(self, pair):
        """seq > hwm + 1 with older events held: dropped, and one re-send request from hwm,
        not one per event; after NACK_INTERVAL_S the same gap is asked for again."""
        router, dealer, _ = pair
        stats, run = Stats(), RunState("r", preset="pretraining", cooldown_s=0.0, now=0.0)
        link = EmitterLink(stats, send(router))
        self._admit(link, run, router, dealer, events([1, 2], base=1))
        assert self._admit(link, run, router, dealer, events([5, 6, 7], base=1)) == []
        got = replies(dealer)
        assert [(m["type"], m["seq"], m["emitter"], m.get("resend")) for m in got] == [("ack", 2, "em-1", True)]
        assert stats.dropped["out_of_order"] == 3 and run.marks.hwm == {"em-1": 2}
        time.sleep(NACK_INTERVAL_S + 0.05)
        self._admit(link, run, router, dealer, events([8], base=1))
        assert [m["seq"] for m in replies(dealer)] == [2]
        assert self._admit(link, run, router, dealer, events(range(3, 9), base=1)) == [3, 4, 5, 6, 7, 8]

    def test_a_gap_the_emitter_no_longer_holds_is_admitted_and_counted(self, pair):
        """base > hwm + 1: those events are gone for good; go on from base, count the hole once."""
        router, dealer, _ = pair
        stats, run = Stats(), RunState("r", preset="pretraining", cooldown_s=0.0, now=0.0)
        link = EmitterLink(stats, send(router))
        self._admit(link, run, router, dealer, events([1, 2], base=1))
        assert self._admit(link, run, router, dealer, events([10, 11], base=10)) == [10, 11]
        assert stats.dropped["seq_gap"] == 1 and replies(dealer) == []

    def test_acks_go_to_each_emitter_with_the_marks_taken_before_the_snapshot(self, pair):
        """ack() sends each emitter the seq recorded in ``marks`` (what the committed
        snapshot holds), not what arrived since."""
        router, dealer, _ = pair
        stats, run = Stats(), RunState("r", preset="pretraining", cooldown_s=0.0, now=0.0)
        link = EmitterLink(stats, send(router))
        self._admit(link, run, router, dealer, events(range(1, 4), base=1))
        marks = link.marks([run])
        self._admit(link, run, router, dealer, events([4], base=1))
        link.ack(marks)
        assert [(m["type"], m["seq"], m.get("resend")) for m in replies(dealer)] == [("ack", 3, None)]


class TestBothHalves:
    def test_a_lost_frame_is_asked_for_and_resent_by_the_real_emitter(self, pair):
        """The daemon half drops a frame on the floor; the next one shows a held gap, the
        link nacks, the real Emitter re-sends from the mark, everything is admitted once
        and in order, and after the ack the emitter holds nothing."""
        router, _, endpoint = pair
        stats, run = Stats(), RunState("r", preset="pretraining", cooldown_s=0.0, now=0.0)
        link = EmitterLink(stats, send(router))
        emit = Emitter(endpoint, run="r", heartbeat_s=3600, batch_max=5, ack_timeout_s=30, secret="s")
        admitted: list[int] = []
        lost = []
        try:
            for step in range(1, 21):
                emit.loss(step, 2.0)

            def pump():
                while router.poll(10):
                    identity, raw = router.recv_multipart()
                    if not lost:  # the first frame is lost in transit
                        lost.append(raw)
                        continue
                    for ev in wire.decode(raw)[0]:
                        if admit_seq(link, run, ev, identity, time.time()):
                            admitted.append(ev["seq"])
                if admitted and admitted[-1] == 21:
                    link.ack(link.marks([run]))
                    return True
                return False

            wait_for(pump, timeout=15, what="every event admitted after the re-send")
            assert admitted == list(range(1, 22))  # run_start is seq 1
            assert stats.dropped["out_of_order"] > 0
            wait_for(lambda: emit.stats["unacked"] == 0 and emit.stats["acked"] == 21, timeout=10,
                     what="the emitter released what was acked")
            assert emit.stats["resends"] >= 1
        finally:
            emit.close(timeout=0.5)
