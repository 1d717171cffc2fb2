"""Turns that cannot be minted (issue 38): a sink's turns go per client, not per secret.

A real wtwind with a webhook sink to a real HTTP server that answers each post in 20 ms;
a flooder over 10 connections starts runs with a fresh secret each and one NaN, until
300 of its pages wait at the sink; a real trainer's NaN is then paged within a second or
so, not after the flood's pages.
"""

from __future__ import annotations

import secrets
import time

import zmq

from helpers import Daemon, sample, wait_for
from http_recorder import Reply, ThreadedRecorder
from wtwin.emitters import connect, wire


def _config(tmp_path, url: str, queue_size: int | None = None) -> str:
    cfg = tmp_path / "wtwind.toml"
    extra = f"queue_size = {queue_size}\n" if queue_size else ""
    cfg.write_text(f'[[sinks]]\ntype = "webhook"\nname = "hook"\nurl = "{url}"\n{extra}')
    return str(cfg)


def _paged(hook: ThreadedRecorder, run: str) -> float | None:
    for req in hook.requests("/hook"):
        for a in req.json().get("alerts", []):
            if a["labels"].get("run") == run and a["labels"].get("kind") == "nonfinite":
                return req.at
    return None


class _Flood:
    """``connections`` connections, each starting runs with a secret of their own and one
    NaN, ``per_round`` runs a connection at each `more`: the daemon admits what their
    buckets allow and drops the rest (``peer_rate``), so the flooder keeps sending until
    its pages are queued at the sink, as a real one would."""

    def __init__(self, endpoint: str, connections: int, per_round: int, prefix: str) -> None:
        self.socks, self.per_round, self.prefix, self.rounds = [], per_round, prefix, 0
        for _ in range(connections):
            sock = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            self.socks.append(sock)

    def more(self) -> None:
        for c, sock in enumerate(self.socks):
            for i in range(self.per_round):
                try:
                    sock.send(wire.encode({"v": 1, "type": "loss", "run": f"{self.prefix}-{c}-{self.rounds}-{i}",
                                           "seq": 1, "step": 1, "loss": float("nan"),
                                           "auth": secrets.token_urlsafe(32)}), zmq.NOBLOCK)
                except zmq.Again:   # its queue is full: the next round
                    break
        self.rounds += 1

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def _page_after_flood(tmp_path, hook, d, flood_args, min_pending: int) -> float:
    legit = connect(d.tcp, run="legit", heartbeat_s=3600, secret_dir=tmp_path)
    for step in range(1, 6):
        legit.loss(step, 3.0 / step)
    assert legit.flush(30), legit.stats
    flood = _Flood(*flood_args)

    def queued():
        flood.more()
        return (sample(d, "wtwind_outbox_pending", sink="hook") or 0) >= min_pending

    try:
        wait_for(queued, 120, 0.05, "the flood's pages queued at the sink")
        nan_at = time.time()
        legit.loss(6, float("nan"))
        legit.flush(5)
        at = wait_for(lambda: _paged(hook, "legit"), 60, 0.02, "the legit page at the webhook")
        return at - nan_at
    finally:
        flood.close()
        legit.close()


class TestTurnsPerClient:
    def test_a_secret_per_run_does_not_buy_turns(self, tmp_path):
        """10 connections start runs, a fresh secret and a NaN each, until 300 pages wait
        at a 20 ms webhook: the trainer's page waits behind about one post per
        connection, not a post per secret (a79b833: 37.9 s)."""
        hook = ThreadedRecorder(default=Reply(delay_s=0.02))
        try:
            with Daemon(args=("--config", _config(tmp_path, hook.rec.url)), tmpdir=str(tmp_path)) as d:
                latency = _page_after_flood(tmp_path, hook, d, (d.tcp, 10, 10, "mint"), min_pending=300)
                assert latency < 2.0, f"the legit page took {latency:.2f} s behind the flood"
        finally:
            hook.close()

    def test_a_full_sink_queue_makes_room_for_another_clients_page(self, tmp_path):
        """A flood that fills the sink's whole queue (queue_size 200): the largest
        client's newest row is written dead for the trainer's page, counted, instead of
        the page itself (before: the page written dead as ``queue full``)."""
        hook = ThreadedRecorder(default=Reply(delay_s=0.05))
        try:
            cfg = _config(tmp_path, hook.rec.url, queue_size=200)
            with Daemon(args=("--config", cfg), tmpdir=str(tmp_path)) as d:
                latency = _page_after_flood(tmp_path, hook, d, (d.tcp, 4, 15, "fill"), min_pending=195)
                assert latency < 2.0, f"the legit page took {latency:.2f} s behind a full queue"
                assert (sample(d, "wtwind_deliveries_total", sink="hook", outcome="dropped") or 0) > 0
        finally:
            hook.close()
