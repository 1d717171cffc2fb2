"""One memory budget, enforced where the bytes enter (issue 24): unit and real-socket tests."""

from __future__ import annotations

import asyncio
import threading

import pytest
import zmq

from helpers import Daemon, http_get, parse_metrics, rss_mb, wait_for
from wtwin.daemon.config import ListenConfig
from wtwin.daemon.errors import ConfigError
from wtwin.daemon.inbound import PeerBuckets, rcvhwm
from wtwin.emitters import connect, wire


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _offer(b: PeerBuckets, clock: Clock, flood: list, ticks: int) -> tuple[float, int]:
    """Every 10 ms for ``ticks``, each flooder offers a 5 ms frame and a trainer a free
    one: (the flooders' handler seconds admitted, the trainer's frames admitted)."""
    spent, legit_ok = 0.0, 0
    for _ in range(ticks):
        clock.t += 0.01
        for peer in flood:
            if b.take(peer, 100):
                b.charge(peer, 0.005)
                spent += 0.005
        legit_ok += b.take(b"legit", 100)
        b.charge(b"legit", 0.0001)
    return spent, legit_ok


def _flood_in_debt(seconds: float) -> tuple[PeerBuckets, Clock]:
    """A trainer and a flooder that owes ``seconds`` (rate 0.2 s a second, 1 s deep)."""
    clock = Clock()
    b = PeerBuckets(0.2, 1.0, clock=clock)
    b.take(b"legit", 1)
    b.take(b"flood", 1)
    b.charge(b"flood", seconds)
    return b, clock


class TestPeerBuckets:
    def test_a_lone_producer_is_never_dropped(self):
        """With no other peer active, a peer in debt goes on (nobody waits behind it)."""
        b = PeerBuckets(0.2, 1.0, clock=Clock())
        for _ in range(50):
            assert b.take(b"flood", 1000, backlogged=True)
            b.charge(b"flood", 0.5)
        assert b.dropped_frames == 0

    def test_a_peer_in_debt_while_another_waits_is_dropped_and_counted(self):
        """Once another peer is active and the handlers are behind, the flooder's debt counts."""
        clock = Clock()
        b = PeerBuckets(0.2, 1.0, clock=clock)
        b.take(b"flood", 1)
        b.take(b"legit", 1)
        clock.t += 10  # both earned a full bucket
        before = (b.dropped_frames, b.dropped_bytes)
        assert b.take(b"flood", 1000)
        b.charge(b"flood", 1.5)  # one 10k-event frame
        assert b.take(b"legit", 10)
        b.charge(b"legit", 0.0001)  # cheap: free
        assert not b.take(b"flood", 1000)
        assert (b.dropped_frames - before[0], b.dropped_bytes - before[1]) == (1, 1000)
        assert b.take(b"legit", 10)  # the legitimate peer keeps its own bucket
        clock.t += 2.0  # the debt of 0.5 s earned back at 0.2 s a second: 2.5 s
        b.take(b"legit", 10)
        assert not b.take(b"flood", 1000)
        clock.t += 0.6
        b.take(b"legit", 10)
        assert b.take(b"flood", 1000)

    def test_a_new_peer_earns_its_credit_during_a_flood(self):
        """A flooder gains nothing by reconnecting while the shared bucket is empty; a new
        peer on a quiet daemon starts with half its credit."""
        clock = Clock()
        b = PeerBuckets(0.2, 1.0, clock=clock)
        b.take(b"legit", 1)
        assert b.take(b"quiet-newcomer", 1000)
        b.take(b"flood", 1)
        b.charge(b"flood", 3.0)  # the shared bucket is in debt
        assert not b.take(b"new", 1000)
        clock.t += 3.0
        b.take(b"legit", 1)
        assert b.take(b"new", 1000)

    def test_not_backlogged_lets_everything_through(self):
        b = PeerBuckets(0.2, 1.0, clock=Clock())
        b.take(b"legit", 1)
        b.charge(b"flood", 5.0)
        assert all(b.take(b"flood", 1000, backlogged=False) for _ in range(5))

    def test_a_debt_is_bounded(self):
        b, clock = _flood_in_debt(1000.0)
        clock.t += 2.0 / 0.2 + 0.01  # from -2 s (MAX_DEBT_S) back above 0 in 10 s, whatever it spent
        b.take(b"legit", 1)
        assert b.take(b"flood", 1)

    def test_a_peer_in_debt_is_taken_again_when_its_wait_is_over_not_before(self):
        """``wait_s``: the hint a dropped frame's reply carries (daemon/drop_notice.py)."""
        b, clock = _flood_in_debt(1.5)
        b.take(b"legit", 1)
        assert not b.take(b"flood", 1)
        wait = b.wait_s(b"flood")
        assert wait > 1.0   # about 1 s of debt at 0.2 s a second
        clock.t += wait * 0.9
        b.take(b"legit", 1)
        assert not b.take(b"flood", 1)
        clock.t += wait * 0.1 + 0.01
        b.take(b"legit", 1)
        assert b.take(b"flood", 1)

    def test_a_peer_with_credit_or_unknown_waits_nothing(self):
        b = PeerBuckets(0.2, 1.0, clock=Clock())
        b.take(b"legit", 1)
        assert b.wait_s(b"legit") == 0.0
        assert b.wait_s(b"never-seen") == 0.0

    def test_many_flooding_connections_share_one_bucket_a_light_peer_does_not(self):
        """Ten connections flooding for 20 s get about the shared rate together, not ten
        times their own; a peer whose frames are cheap still goes on."""
        clock = Clock()
        b = PeerBuckets(0.1, 0.5, clock=clock, total_rate=0.3)
        flood = [b"flood-%d" % i for i in range(10)]
        spent, legit_ok = _offer(b, clock, flood, 2000)
        assert spent <= 0.3 * 20 + 0.01 * 10 * 20 + 1.0, spent  # shared + light allowances + bursts
        assert legit_ok >= 1990

    def test_light_allowances_draw_on_one_pool_a_peer_that_costs_nothing_does_not(self):
        """Forty connections, each with a full light allowance, offer 5 ms frames while the
        shared bucket is empty: past what each may spend of its own (down to ``RESTED`` of
        its allowance), they draw on one pool (a tenth of the shared rate), not on forty
        allowances; a trainer whose frames are free goes on. Before the pool each
        connection spent its own allowance and what it earned: 40 x 0.06 = 2.4 s of
        handler time in one second."""
        clock = Clock()
        b = PeerBuckets(0.1, 0.5, clock=clock, total_rate=0.3)
        b.take(b"legit", 100)
        b.take(b"hog", 100)
        b.charge(b"hog", 2.0)  # the shared bucket is in debt: light allowances only
        flood = [b"flood-%d" % i for i in range(40)]
        for peer in flood:  # known before the debt: each with its full light allowance
            b._peers[peer] = (0.5, 0.05, clock.t)
        spent, legit_ok = _offer(b, clock, flood, 100)   # one second
        # each: down to RESTED of its allowance (a quarter of 0.05: three 5 ms frames) and
        # what it earns (0.01 s a second); all: the pool's 0.03 a second and its depth
        assert spent <= 40 * (0.015 + 0.01) + 0.03 + 0.03 + 0.005, spent
        assert legit_ok == 100

    def test_a_collector_pause_is_paid_by_the_shared_bucket_not_the_peer(self):
        """A full collection in a trainer's one-event frame (0.3 s under a flood of runs) is
        not the trainer's debt: before, it left the trainer refused for seconds."""
        clock = Clock()
        b = PeerBuckets(0.1, 0.5, clock=clock, total_rate=0.3)
        b.take(b"flood", 100)
        b.take(b"legit", 100)
        b.charge(b"legit", 0.0001, 0.3)
        assert b._peers[b"legit"][:2] == (0.25, 0.05)   # its credit and light allowance untouched
        assert b._total_tokens < 0.3 - 0.29             # the shared bucket paid the pause
        assert b.take(b"legit", 100)

    def test_the_table_of_peers_is_bounded(self):
        clock = Clock()
        b = PeerBuckets(0.2, 1.0, clock=clock, max_peers=64)
        for i in range(10_000):
            clock.t += 0.001
            b.take(i.to_bytes(4, "little"), 10)
            b.charge(i.to_bytes(4, "little"), 0.01)
        assert len(b) <= 64


class TestQueueBytes:
    def test_hwm_is_the_byte_budget_over_the_largest_frame(self):
        def hwm(connections: int) -> int:
            return rcvhwm(ListenConfig(max_frame_bytes=1 << 20, peer_queue_bytes=16 << 20,
                                       queue_bytes=256 << 20, max_connections=connections))
        assert hwm(1) == 16        # at most peer_queue_bytes
        assert hwm(64) == 4        # 64 connections share 256 MiB
        assert hwm(256) == 1       # never below one message

    def test_a_full_pipe_is_never_resized_and_keeps_flowing_when_many_connect(self, tmp_path):
        """A trainer's pipe full, then forty connections arrive: libzmq stopped reading a
        full pipe whose RCVHWM changed (zeromq/libzmq#2509), and the daemon resized on
        every connection; a trainer that connected before the paced flood was never read
        again about one flood in three. Now the pipes keep the size set before bind."""
        asyncio.run(self._crowd_after_a_full_pipe(f"ipc://{tmp_path}/q.sock"))

    @staticmethod
    async def _crowd_after_a_full_pipe(endpoint: str) -> None:
        from wtwin.daemon.receiver import Receiver

        rx = Receiver(ListenConfig(endpoints=(endpoint,)), ctx=zmq.Context.instance())
        rx.bind()
        got: list[bytes] = []
        trainer = _dealer(endpoint)
        sent = [b"%d" % i for i in range(4 * rx.hwm)]
        for frame in sent:
            trainer.send(frame)       # more than the pipe holds: it is full, the rest waits
        crowd = []
        try:
            # the loop does not turn while this coroutine runs: drained by hand
            rx.start(asyncio.get_running_loop(), lambda identity, frame, user, deadline: got.append(frame))
            for _ in range(40):
                crowd.append(_dealer(endpoint))
            wait_for(lambda: rx.drain_monitor() is None and rx.connections >= 40, 30, 0.01,
                     "the crowd's connections counted")
            assert rx.sock.getsockopt(zmq.RCVHWM) == rx.hwm == rcvhwm(rx.cfg)
            wait_for(lambda: rx.drain() >= 0 and len(got) == len(sent), 30, 0.01, "every frame of the trainer")
            assert got == sent
        finally:
            for sock in crowd + [trainer]:
                sock.close(linger=0)
            rx.close()

    def test_config_refuses_connections_whose_frames_do_not_fit_the_queue(self):
        with pytest.raises(ConfigError, match="max_connections"):
            ListenConfig(max_frame_bytes=1 << 20, queue_bytes=128 << 20, max_connections=129)

    def test_config_refuses_a_queue_smaller_than_a_frame(self):
        with pytest.raises(ConfigError, match="peer_queue_bytes"):
            ListenConfig(max_frame_bytes=1 << 20, peer_queue_bytes=1000)


def _dealer(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _rate_dropped(d: Daemon) -> float:
    status, body = http_get(d.url + "/metrics", 60)  # the loop may be inside a 10k-event frame
    return parse_metrics(body).get(("wtwind_frames_dropped_total", (("reason", "peer_rate"),)), 0.0)


def _dropped(d: Daemon, reason: str) -> float:
    return d.metrics().get(("wtwind_events_dropped_total", (("reason", reason),)), 0.0)


class TestFloodsOverRealSockets:
    def test_a_resent_big_batch_costs_the_flooder_not_the_legit_run(self, tmp_path):
        """Issue 24's inbound flood: one client re-sends a 510 KB batch of 10k losses
        while a real trainer sends; the flood is dropped (counted), RSS stays small, and
        the trainer's every event is acked."""
        frame = wire.encode_batch([{"v": 1, "type": "loss", "run": "flood", "seq": i + 1, "step": i,
                                    "loss": 2.0} for i in range(10_000)])
        with Daemon(tmpdir=str(tmp_path)) as d:
            legit = connect(d.tcp, run="legit", heartbeat_s=3600, secret_dir=tmp_path)
            flood, stop = _dealer(d.tcp), threading.Event()
            peak = [0.0]

            def send():
                while not stop.is_set():
                    try:
                        flood.send(frame, zmq.NOBLOCK)
                    except zmq.Again:
                        stop.wait(0.001)
                    peak[0] = max(peak[0], rss_mb(d.proc.pid))

            t = threading.Thread(target=send, daemon=True)
            t.start()
            try:
                step = 0
                while _rate_dropped(d) == 0:  # the trainer keeps sending: the peers contend
                    for _ in range(20):
                        step += 1
                        legit.loss(step, 2.0)
                        legit.flush(0.01)
                    assert step < 20_000, "no flood frame was dropped for its rate"
                assert legit.flush(60), legit.stats
            finally:
                stop.set()
                t.join(10)
                flood.close()
            assert legit.stats["acked"] >= step
            assert peak[0] < 600, f"RSS {peak[0]:.0f} MB under the flood"
            legit.close()

    def test_fresh_emitter_ids_with_duplicates_and_gaps_are_refused_past_the_quota(self, tmp_path):
        """Issue 24: an id per event with seq 0 (a duplicate) or a gap used to bypass
        max_emitters_per_run; now the 65th id on the run is refused and counted."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            sock = _dealer(d.tcp)
            sock.send(wire.encode({"v": 1, "type": "run_start", "run": "ids", "seq": 1, "emitter": "first"}))
            n = 3000
            for start in range(0, n, 500):
                sock.send(wire.encode_batch([{"v": 1, "type": "heartbeat", "run": "ids",
                                              "seq": 0 if k % 2 else 7, "emitter": f"{start + k:064d}"}
                                             for k in range(500)], base=3))
            wait_for(lambda: _dropped(d, "emitter_quota") >= n - 64, 60, 0.1, "ids refused past the quota")
            assert _dropped(d, "duplicate") + _dropped(d, "out_of_order") <= 64
            sock.close()


class TestPagesFirst:
    def test_a_sink_serves_principals_in_turn(self):
        """A flood of one group's rows does not stand in front of another group's page."""
        from wtwin.detect.alert import Alert
        from wtwin.sinks.delivery_queue import PendingIndex, Row

        def alert(run):
            return Alert(run=run, kind="nonfinite", severity="critical", status="firing", step=1,
                         message="", started_at=0.0)

        index = PendingIndex(group_of=lambda a: "anonymous" if a.run.startswith("flood") else "team")
        for i in range(1000):
            index.moved(None, Row(id=i + 1, sink="hook", alert=alert(f"flood-{i}")))
        index.moved(None, Row(id=5000, sink="hook", alert=alert("legit")))
        served = [index.due("hook", 1.0, 1)[0].alert.run for _ in range(2)]
        assert "legit" in served
        assert index.pending_in("hook", "anonymous") == 1000


class TestFreeText:
    def test_a_runs_kind_metrics_and_rewinds_are_capped(self):
        """Issue 24: a 4 KiB kind, 64 eval metrics and endless rewinds keep bounded text."""
        from wtwin.daemon.run_state import RunState

        run = RunState("r", preset="pretraining", cooldown_s=60, now=0.0,
                       max_kind_chars=64, max_eval_metrics=16, max_rewinds_kept=32)
        run.observe({"type": "run_start", "run": "r", "kind": "k" * 4096}, 1.0)
        assert run.kind == "k" * 64
        run.observe({"type": "eval", "run": "r", "step": 1,
                     "metrics": {f"m{i}": 1.0 for i in range(64)}}, 2.0)
        assert len(run.last_eval) == 16
        for i in range(100):
            run.observe({"type": "rewind", "run": "r", "step": 1, "from_step": 2, "kind": "x" * 64,
                         "checkpoint": "/c/" + "p" * 250}, 3.0 + i)
        assert len(run.rewinds) == 32
        assert len(run.rewinds[-1]["checkpoint"]) == 64


class TestClientLogLimit:
    def test_a_clients_lines_are_rate_limited_counted_and_cut(self):
        import structlog

        from wtwin.daemon.logsetup import ClientLogLimit

        clock = Clock()
        limit = ClientLogLimit(per_s=5, burst=20, clock=clock)
        passed = []
        for _ in range(1000):
            try:
                passed.append(limit(None, "info", {"event": "run_started", "kind": "k" * 4096,
                                                   "_client": b"flooder"}))
            except structlog.DropEvent:
                pass
        assert len(passed) == 20 and limit.dropped == 980
        assert all("_client" not in e and len(e["kind"]) < 300 for e in passed)
        other = limit(None, "info", {"event": "run_started", "_client": b"legit"})  # its own budget
        assert other["event"] == "run_started"
        clock.t += 1.0
        again = limit(None, "info", {"event": "run_started", "_client": b"flooder"})
        assert again["suppressed"] == 980
        assert limit(None, "info", {"event": "ready"}) == {"event": "ready"}  # not a client's
