"""A frame's events are handled in slices (daemon/frame_backlog.py, `Ingest.frame`'s
deadline): a client's 10,000-event frames no longer hold the loop while another trainer's
NaN waits behind them. Before, each such frame was handled whole (0.4-0.7 s under the
all-at-once flood of `tests/bench/attacks.py`), and the page waited for it.

Over a real ZeroMQ socket into the daemon's own receiver, server and SQLite store, the
loop turned by hand (`Receiver.drain`), so what is asserted is the order in which work was
done, not how long it took."""

from __future__ import annotations

import asyncio

import msgpack
import zmq

from helpers import raw_dealer, wait_for
from wtwin.daemon.config import DaemonConfig, ListenConfig, StateConfig
from wtwin.daemon.server import Server
from wtwin.emitters import wire

FLOOD_FRAMES, PER_FRAME = 4, 10_000


def alerts(sock) -> list[dict]:
    got = []
    while sock.poll(0):
        msg = msgpack.unpackb(sock.recv())
        if msg.get("type") == "alert":
            got.append(msg)
    return got


def test_a_nan_is_paged_while_a_flood_of_big_frames_waits_its_turn(tmp_path):
    asyncio.run(_flood_and_nan(tmp_path))  # inside a running loop, as in the daemon


async def _flood_and_nan(tmp_path) -> None:
    endpoint = f"ipc://{tmp_path}/slices.sock"
    server = Server(DaemonConfig(listen=ListenConfig(endpoints=(endpoint,)),
                                 state=StateConfig(path=str(tmp_path / "s.db"), flush_interval_s=60)))
    server.store.open(asyncio.get_running_loop())
    rx = server.receiver
    rx.bind()
    rx.start(asyncio.get_running_loop(), server.handle_frame)
    flood, trainer = raw_dealer(endpoint), raw_dealer(endpoint)
    try:
        # the costliest events there are: a flat loss, every one of them a finding
        events = [{"v": 1, "type": "loss", "run": "flood", "seq": i + 1, "step": i, "loss": 2.0}
                  for i in range(PER_FRAME)]
        frame = wire.encode_batch(events)
        for _ in range(FLOOD_FRAMES):
            flood.send(frame)
        wait_for(lambda: rx.drain() >= 0 and len(rx.backlog) == 1, what="the first flood frame cut short")
        trainer.send(wire.encode({"v": 1, "type": "loss", "run": "legit", "seq": 1, "step": 1,
                                  "loss": float("nan"), "emitter": "trainer"}))
        paged: list[dict] = []
        wait_for(lambda: rx.drain() >= 0 and paged.extend(alerts(trainer)) is None and paged,
                 what="the trainer's page")
        assert paged[0]["kind"] == "nonfinite" and paged[0]["severity"] == "critical"
        # the flood had not been handled yet: it waited its turn, it did not go first
        assert len(rx.backlog) == 1
        assert server.table.get("flood").events < FLOOD_FRAMES * PER_FRAME
        # and nothing of it is lost: every event is handled, in the order it was sent
        wait_for(lambda: rx.drain() >= 0 and not rx.backlog, timeout=60, what="the flood handled")
        flooded = server.table.get("flood")
        assert flooded.events == FLOOD_FRAMES * PER_FRAME
        assert server.stats.loop_errors == 0 and rx.handler_errors == 0
    finally:
        for sock in (flood, trainer):
            sock.close(linger=0)
        rx.close()
        await server.store.close()


def test_a_frame_handled_without_a_deadline_is_handled_whole(tmp_path):
    """Replays and tests call the handler without a deadline: nothing is left over."""

    async def main():
        server = Server(DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/w.sock",)),
                                     state=StateConfig(path=str(tmp_path / "w.db"), flush_interval_s=60)))
        server.store.open(asyncio.get_running_loop())
        events = [{"v": 1, "type": "loss", "run": "whole", "seq": i + 1, "step": i, "loss": 2.0}
                  for i in range(PER_FRAME)]
        assert server.handle_frame(b"peer", wire.encode_batch(events)) is None
        assert server.table.get("whole").events == PER_FRAME
        server.receiver.close()
        await server.store.close()

    asyncio.run(main())


def test_a_parked_peers_later_frames_ask_its_bucket_again(tmp_path):
    """A frame queued behind a rest was admitted while the rest was unpaid: when its turn
    comes its peer's bucket is asked again, and a peer in debt loses it (counted)."""
    from wtwin.daemon.receiver import Receiver

    rx = Receiver(ListenConfig(endpoints=(f"ipc://{tmp_path}/p.sock",)), ctx=zmq.Context.instance())
    handled = []
    rx.handler = lambda identity, frame, user, deadline: handled.append(frame)
    rx.buckets.take(b"other", 1)
    rx.buckets.take(b"flood", 1)
    rx.buckets.charge(b"flood", 5.0)      # its rest's cost: deep in debt, others contend
    before = rx.buckets.dropped_frames
    assert rx._resume(b"flood", (b"flood", b"queued frame", None), float("inf")) is None
    assert handled == [] and rx.buckets.dropped_frames == before + 1
    assert rx._resume(b"other", (b"other", b"its frame", None), float("inf")) is None
    assert handled == [b"its frame"]
    rx.close()


class _Rest:
    def __init__(self, events: int) -> None:
        self.events = events

    def __call__(self, deadline: float):
        return None


def test_the_backlog_is_bounded_in_frames_bytes_and_events():
    """Past ``max_events`` held by rests a new frame is not cut (handled whole, as before
    slices); past a peer's ``limit`` or ``max_bytes`` together a queued frame is refused
    and counted. What is served gives its room back."""
    from wtwin.daemon.frame_backlog import FrameBacklog

    b = FrameBacklog(max_bytes=100, max_events=10)
    b.park(b"a", _Rest(6))
    assert b.has_room()
    b.park(b"b", _Rest(6))
    assert not b.has_room()
    assert b.queue(b"a", b"a", b"x" * 60, None, limit=16)
    assert not b.queue(b"b", b"b", b"x" * 60, None, limit=16)      # 120 bytes > 100
    assert not b.queue(b"a", b"a", b"x", None, limit=1)             # its rest and 1 frame already
    assert (b.dropped_frames, b.dropped_bytes) == (2, 61)
    served = []
    while b:
        b.serve(float("inf"), lambda peer, item, deadline: served.append(peer), lambda: 0.0)
    assert served == [b"a", b"b", b"a"]      # in turns, each peer's own in order
    assert (b.events, b.bytes) == (0, 0) and b.has_room()
