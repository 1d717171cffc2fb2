"""Fuzz the ROUTER: >= 10^5 random and mutated frames at a real socket, in process.

Every frame goes DEALER -> the daemon's own ROUTER (``Server.receiver``) over ipc
and through ``Server.handle_frame``. After each batch: the daemon is alive (no
exception, no loop error), every frame was seen, each rejected event is counted
under exactly the reason the wire module gives, and every good frame interleaved
with the garbage was processed (its run's processed-event count says so).
"""

from __future__ import annotations

import asyncio
import os
import random

import msgpack
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import wait_for
from wtwin.daemon.config import DaemonConfig, ListenConfig
from wtwin.daemon.server import Server
from wtwin.daemon.store.config import StateConfig
from wtwin.emitters import wire

MAX_FRAME = 4096
FRAMES_PER_EXAMPLE = 500
EXAMPLES = int(os.environ.get("WTWIN_FUZZ_EXAMPLES", 210))  # 210 x 500 = 105,000 frames

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(),
                    st.text(max_size=20), st.binary(max_size=20))
values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)), max_leaves=10)
FIELDS = ("v", "type", "run", "seq", "step", "loss", "lr", "metrics", "path", "status", "events",
          "emitter", "base", "config", "want", "format")


def template(rng: random.Random) -> dict:
    kind = rng.choice([t for t in wire.EVENT_TYPES if t != "checkpoint"])  # no spectral jobs
    ev = {"v": 1, "type": kind, "run": f"fz{rng.randrange(50)}", "seq": rng.randrange(1 << 20)}
    ev.update({"loss": {"step": rng.randrange(10**6), "loss": rng.random()},
               "eval": {"step": 3, "metrics": {"val_loss": 1.5}},
               "checkpoint": {"step": 3, "path": "/x.pt", "want": ["analyze"]},
               "run_end": {"status": "completed"}}.get(kind, {}))
    return ev


def mutate(rng: random.Random, draw_value, frame_obj: dict) -> bytes:
    how = rng.randrange(7)
    if how == 0:  # a field replaced by an arbitrary value
        frame_obj[rng.choice(FIELDS)] = draw_value()
    elif how == 1:  # a field removed
        frame_obj.pop(rng.choice(list(frame_obj)), None)
    elif how == 2:  # a batch of templates and arbitrary things
        events = [frame_obj, draw_value(), template(rng)][: rng.randrange(4)]
        frame_obj = {"v": rng.choice([1, 1, 2]), "type": "batch",
                     "events": events if rng.random() < 0.7 else draw_value()}
    raw = msgpack.packb(frame_obj, use_bin_type=True)
    if how == 3 and raw:  # bit flips
        b = bytearray(raw)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        raw = bytes(b)
    elif how == 4:  # truncated
        raw = raw[: rng.randrange(len(raw) + 1)]
    elif how == 5:  # oversized (below ZMQ's hard cap, above the configured maximum)
        raw = raw + b"\x00" * (MAX_FRAME + 1 - len(raw) + rng.randrange(500))
    return raw


class Harness:
    def __init__(self, tmp_path) -> None:
        cfg = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/fz.sock",),
                                               max_frame_bytes=MAX_FRAME),
                           state=StateConfig(enabled=False))
        self.server = Server(cfg)
        self.server.receiver.bind()
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.connect(cfg.listen.endpoints[0])
        self.sent = self.good = self.envelopes = 0
        self.expected: dict[str, int] = {}

    def send(self, frame: bytes) -> None:
        for reason in wire.decode(frame, MAX_FRAME)[1]:
            self.expected[reason] = self.expected.get(reason, 0) + 1
        self.sock.send(frame)
        self.sent += 1

    def send_good(self) -> None:
        self.good += 1
        ev = {"v": 1, "type": "loss", "run": "good", "seq": self.good, "step": self.good,
              "loss": 2.0, "emitter": "good-emitter"}
        self.send(wire.encode(ev))

    def settle(self) -> None:
        srv = self.server

        def done():
            srv.receiver.drain()
            return srv.stats.frames == self.sent and srv.receiver.bad_envelopes == self.envelopes

        wait_for(done, timeout=30, interval=0.001, what="every frame handled")
        assert srv.stats.loop_errors == 0
        assert {k: v for k, v in srv.stats.rejected.items() if v} == self.expected
        assert srv.table.get("good").events == self.good


def test_router_survives_and_counts_105k_random_and_mutated_frames(tmp_path):
    asyncio.run(_fuzz(tmp_path))  # inside a running loop, as in the daemon


async def _fuzz(tmp_path):
    h = Harness(tmp_path)

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2**32 - 1), data=st.data())
    def one_batch(seed, data):
        rng = random.Random(seed)
        pool = [data.draw(values) for _ in range(8)]  # hypothesis-shaped arbitrary values
        draw_value = lambda: rng.choice(pool)  # noqa: E731
        for i in range(FRAMES_PER_EXAMPLE):
            r = rng.random()
            if i % 10 == 0:
                h.send_good()
            elif r < 0.08:
                h.send(rng.randbytes(rng.randrange(64)))
            elif r < 0.16:
                h.send(msgpack.packb(draw_value(), use_bin_type=True))
            elif r < 0.17:
                h.sock.send_multipart([b"two", b"parts"])
                h.envelopes += 1
            else:
                h.send(mutate(rng, draw_value, template(rng)))
        h.settle()

    one_batch()
    h.send_good()
    h.settle()
    assert h.sent + h.envelopes >= EXAMPLES * FRAMES_PER_EXAMPLE and sum(h.expected.values()) > 0.3 * h.sent
    assert set(h.expected) >= {"oversized", "undecodable", "not_a_map", "bad_version",
                               "unknown_type", "missing_field", "bad_type", "bad_batch"}
    h.sock.close()
    h.server.receiver.close()
