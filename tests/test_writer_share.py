"""A client's share of the store's writer (issue 38): its alerts queued there cannot
delay another client's page.

Every alert is one ``synchronous=FULL`` transaction on the writer thread, taken in
order. A flooder that opens a run per frame, each with its own secret and a NaN, queued
alerts faster than the writer committed them, and another client's page waited behind
them: 1.06-1.19 s at the webhook under `tests/bench/attacks.py paced`, the writer's
transactions grown to 1,900 alerts and 3 s each. Now, while a client has
``JOURNAL_SHARE`` alerts not yet committed and another client sends, its frames are
dropped unread and its connection is told when to send again.

Both halves over real ZeroMQ sockets: the receiver's rule against a bare ``Receiver``,
and the whole path in a real in-process ``Server`` whose writer thread the test holds
still, so that what queues behind it is counted, not timed.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading

import msgpack
import pytest
import zmq
from structlog.testing import capture_logs

from helpers import raw_dealer, until, wait_for
from wtwin.daemon.alert_path import JOURNAL_SHARE
from wtwin.daemon.config import DaemonConfig, HttpConfig, ListenConfig
from wtwin.daemon.receiver import DROPS_LOG_S, JOURNAL_RETRY_S, Receiver
from wtwin.daemon.server import Server
from wtwin.daemon.store.config import StateConfig
from wtwin.emitters import connect, wire


def _dealer(endpoint: str, identity: bytes) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity)   # the ROUTER's name for it: the client
    sock.connect(endpoint)
    return sock


def _replies(sock: zmq.Socket) -> list[dict]:
    out = []
    while sock.poll(0):
        out.append(msgpack.unpackb(sock.recv()))
    return out


def drained(rx: Receiver) -> bool:
    """One receive turn (what arrived is handled or dropped), then True: for a condition
    read after it."""
    rx.drain()
    return True


def _nan_run(name: str) -> bytes:
    return wire.encode({"v": 1, "type": "loss", "run": name, "seq": 1, "step": 1, "loss": float("nan"),
                        "auth": secrets.token_urlsafe(32)})


@pytest.fixture
def at_share(tmp_path):
    """A bare receiver whose client ``flood`` has its share of the writer waiting, and a
    second client, ``trainer``: (receiver, the identities its handler got, flood, trainer)."""
    endpoint = f"ipc://{tmp_path}/w.sock"
    rx = Receiver(ListenConfig(endpoints=(endpoint,)), ctx=zmq.Context.instance())
    rx.bind()
    handled: list[bytes] = []
    rx.handler = lambda identity, frame, user, deadline: handled.append(identity)
    rx.journaling, rx.journal_share = {b"flood": JOURNAL_SHARE}, JOURNAL_SHARE
    flood, trainer = _dealer(endpoint, b"flood"), _dealer(endpoint, b"trainer")
    try:
        yield rx, handled, flood, trainer
    finally:
        flood.close()
        trainer.close()
        rx.close()


class TestReceiverRule:
    def test_a_client_at_its_share_waits_only_while_another_sends(self, at_share):
        """At its share of the writer, a lone client's frames are still handled (nobody
        waits behind it); once another client sends, they are dropped unread, counted, and
        its connection is told to send again in ``JOURNAL_RETRY_S``. The other client's
        frames go on."""
        rx, handled, flood, trainer = at_share
        flood.send(b"alone")
        wait_for(lambda: drained(rx) and handled, 30, 0.005, "the lone client's frame handled")
        assert handled == [b"flood"] and rx.journal_dropped == 0

        trainer.send(b"step")
        wait_for(lambda: drained(rx) and b"trainer" in handled, 30, 0.005, "the trainer's frame")
        flood.send(b"more")
        wait_for(lambda: drained(rx) and rx.journal_dropped, 30, 0.005, "the flood's frame dropped")
        assert handled == [b"flood", b"trainer"]
        assert rx.journal_dropped == 1 and rx.journal_dropped_bytes == len(b"more")
        notices = wait_for(lambda: _replies(flood), 30, 0.005, "the flooder told to send again")
        assert [(n["type"], n["retry_s"]) for n in notices] == [("dropped", JOURNAL_RETRY_S)]

        rx.journaling[b"flood"] = JOURNAL_SHARE - 1   # one committed: its turn again
        flood.send(b"again")
        wait_for(lambda: drained(rx) and len(handled) == 3, 30, 0.005, "the flood's next frame")
        assert rx.journal_dropped == 1

    def test_the_log_says_what_was_dropped_once_a_minute_at_most(self, at_share):
        """Drops are said in one warning (``frames_dropped``), by reason, at most every
        ``DROPS_LOG_S``, counting only what is new since the last one."""
        rx, steps, flood, trainer = at_share

        def drop(n: int) -> None:
            goal, seen = rx.journal_dropped + n, len(steps)
            trainer.send(b"step")       # the other client sends first: the flooder contends
            wait_for(lambda: drained(rx) and len(steps) > seen, 30, 0.005, "the trainer's frame")
            for _ in range(n):
                flood.send(b"flood")
            wait_for(lambda: drained(rx) and rx.journal_dropped >= goal, 30, 0.005, f"{n} frames dropped")

        with capture_logs() as logs:
            rx.report_drops(1000.0)          # nothing dropped yet: nothing said
            drop(3)
            rx.report_drops(1001.0)
            drop(2)
            rx.report_drops(1001.0 + DROPS_LOG_S / 2)    # within the minute: not yet
            rx.report_drops(1001.0 + DROPS_LOG_S)
            rx.report_drops(1001.0 + 3 * DROPS_LOG_S)    # nothing new: nothing said
        said = [e for e in logs if e["event"] == "frames_dropped"]
        assert [(e["log_level"], e.get("journal_backlog"), e["since_s"]) for e in said] == [
            ("warning", 3, None), ("warning", 2, round(DROPS_LOG_S))]
        assert "told to send again" in said[0]["hint"]


class TestThroughTheServer:
    def test_the_flood_queues_its_share_ahead_of_a_page_not_its_whole_flood(self, tmp_path):
        """The writer held still: a trainer sends, then a flooder starts 40 runs, a fresh
        secret and a NaN each, then the trainer's NaN. At most ``JOURNAL_SHARE`` of the
        flood's alerts are queued ahead of the page (on a79b833 all 40 were), the rest
        are dropped unread; once the writer goes on, every queued alert commits and no
        client is left counted."""
        asyncio.run(self._flood(tmp_path))

    async def _flood(self, tmp_path):
        endpoint = f"ipc://{tmp_path}/s.sock"
        cfg = DaemonConfig(listen=ListenConfig(endpoints=(endpoint,)), http=HttpConfig(port=0),
                           state=StateConfig(path=str(tmp_path / "s.db"), flush_interval_s=0.05))
        srv = Server(cfg)
        await srv.startup(asyncio.get_running_loop())
        gate, flood, trainer = threading.Event(), None, None
        try:
            trainer = connect(endpoint, run="legit", heartbeat_s=3600, secret_dir=tmp_path)
            for step in range(1, 4):
                trainer.loss(step, 2.0 / step)
            assert await asyncio.to_thread(trainer.flush, 30)
            srv.store.writer.submit(lambda conn: gate.wait(60))   # the writer is busy from here
            flood = _dealer(endpoint, b"flood")
            for i in range(40):
                flood.send(_nan_run(f"minted-{i}"))
            trainer.loss(4, 1.0)    # the trainer still sends: the flooder contends
            await until(lambda: srv.receiver.journal_dropped >= 40 - JOURNAL_SHARE, 30,
                        what="the flood's frames past its share dropped")
            assert srv.alerts.journaling[b"flood"] == JOURNAL_SHARE
            assert srv.receiver.journal_dropped == 40 - JOURNAL_SHARE
            trainer.loss(5, float("nan"))
            await until(lambda: len(srv.alerts.journaling) == 2, 30, what="the trainer's page queued")
            gate.set()
            await until(lambda: not srv.alerts.journaling, 30, what="every queued alert committed")
            notices = [r for r in _replies(flood) if r.get("type") == "dropped"]
            assert notices and notices[0]["retry_s"] == JOURNAL_RETRY_S
        finally:
            gate.set()
            if flood is not None:
                flood.close()
            if trainer is not None:
                trainer.close()
            await srv.shutdown()
        db = sqlite3.connect(tmp_path / "s.db")
        order = [run for (run,) in db.execute("SELECT run FROM alerts ORDER BY rowid")]
        assert "legit" in order
        assert order.index("legit") <= JOURNAL_SHARE, order
