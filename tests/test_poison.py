"""Issue 15, attacks 1 and 2: one client's poison never stops other runs' acks and alerts.

Over real sockets: the hostile frames (a step of 2**64-1, a config nested 999 deep) go
to a real daemon, and a legitimate trainer beside them keeps being acked and alerted.
In process, with a real SQLite store: a run whose state cannot be encoded or written is
quarantined alone, the rest of the flush commits, the timer keeps running, the alert of
a legitimate run in the same batch reaches the journal and the outbox, and /readyz turns
red only when persistence itself fails.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time


from helpers import http_get, raw_dealer, sample, until, wait_for
from test_wire import deep_config_frame
from wtwin.daemon.config import DaemonConfig, HttpConfig, ListenConfig
from wtwin.daemon.server import Server
from wtwin.daemon.store.config import StateConfig
from wtwin.emitters import connect, wire


def hostile_frames() -> list[bytes]:
    return [
        wire.encode({"v": 1, "type": "loss", "run": "evil", "seq": 1, "step": 2**64 - 1, "loss": 1.0}),
        wire.encode({"v": 1, "type": "checkpoint", "run": "evil", "seq": 2, "step": -1, "path": "/x"}),
        deep_config_frame(999),
    ]


class TestHostileFramesOverSockets:
    def test_huge_step_and_deep_config_are_rejected_and_others_are_acked_and_alerted(self, daemon):
        """Attack 1 and 2 against a real daemon: rejected as bad_value; a trainer beside
        them is acked (flush returns) and gets its critical alert; /readyz stays green."""
        got = []
        emit = connect(daemon.tcp, run="victim", on_alert=got.append)
        emit.loss(1, 2.0)
        assert emit.flush(10), "the victim's first event is acked"
        evil = raw_dealer(daemon.tcp)
        for _ in range(3):
            for frame in hostile_frames():
                evil.send(frame)
        wait_for(lambda: sample(daemon, "wtwind_events_rejected_total", reason="bad_value") == 9,
                 what="every hostile frame rejected as bad_value")
        for step in range(2, 50):
            emit.loss(step, 2.0 - step / 100)
        emit.loss(50, float("nan"))
        assert emit.flush(10), "the victim is still acked after the hostile frames"
        wait_for(lambda: emit.poll() or any(a["kind"] == "nonfinite" for a in got),
                 what="the victim's nonfinite alert back at the trainer")
        assert http_get(daemon.url + "/readyz")[0] == 200
        assert sample(daemon, "wtwind_store_write_errors_total") == 0
        evil.send_multipart([b"two", b"parts"])
        wait_for(lambda: sample(daemon, "wtwind_frames_bad_envelope_total") == 1, what="envelope counted")
        huge = raw_dealer(daemon.tcp)  # far over max_frame_bytes: libzmq cuts the peer
        huge.send(b"\x00" * (4 << 20))
        wait_for(lambda: (sample(daemon, "wtwind_peer_disconnects_total") or 0) >= 1, what="cut peer counted")
        huge.close(linger=0)
        exported = {name for name, _ in daemon.metrics()}
        assert {"wtwind_frame_handler_errors_total", "wtwind_replies_dropped_total", "wtwind_loop_errors_total",
                "wtwind_store_flush_errors_total", "wtwind_store_failed_operations_total",
                "wtwind_store_journal_errors_total", "wtwind_delivery_errors_total",
                "wtwind_alerts_dropped_total"} <= exported
        evil.close()
        emit.close()


class InProcess:
    """A real Server (ROUTER, HTTP, SQLite store) on this test's event loop."""

    def __init__(self, tmp_path) -> None:
        cfg = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/p.sock",)),
                           http=HttpConfig(port=0),
                           state=StateConfig(path=str(tmp_path / "p.db"), flush_interval_s=0.05))
        self.server = Server(cfg)
        self.endpoint = cfg.listen.endpoints[0]
        self.db = tmp_path / "p.db"

    async def __aenter__(self) -> "InProcess":
        await self.server.startup(asyncio.get_running_loop())
        return self

    async def __aexit__(self, *exc) -> None:
        await self.server.shutdown()

    def readyz(self) -> int:
        return http_get(f"http://127.0.0.1:{self.server.http_port}/readyz")[0]


class TestStoreIsolatesPoison:
    def test_unstorable_runs_are_quarantined_alone_and_the_rest_commits(self, tmp_path):
        asyncio.run(self._poison(tmp_path))

    async def _poison(self, tmp_path):
        async with InProcess(tmp_path) as p:
            srv, now = p.server, time.time()
            # state that got past every check (the wire bounds stop these today): one run
            # whose step SQLite cannot bind, one whose snapshot no encoder takes
            unwritable = srv.table.get_or_create("unwritable", now)
            unwritable.step = 2**64 - 1
            unencodable = srv.table.get_or_create("unencodable", now)
            unencodable.last_eval = {"val_loss": object()}
            got = []
            emit = connect(p.endpoint, run="victim", on_alert=got.append)
            for step in range(1, 20):
                emit.loss(step, 2.0)
            srv.snapshots.mark(unwritable)
            srv.snapshots.mark(unencodable)
            emit.loss(20, float("nan"))  # a critical alert in the same flush as the poison
            assert await asyncio.to_thread(emit.flush, 10), "the victim is acked"
            await until(lambda: len(srv.snapshots.quarantine) == 2, what="both poisoned runs quarantined")
            await until(lambda: emit.poll() or got, what="the victim's alert")
            flushes = srv.snapshots.flushes
            for step in range(21, 40):
                emit.loss(step, 2.0)
            assert await asyncio.to_thread(emit.flush, 10), "still acked: the timer is alive"
            assert srv.snapshots.flushes > flushes
            assert await asyncio.to_thread(p.readyz) == 200
            emit.close()
            await until(lambda: srv.outbox.counts() is not None and srv.snapshots.flushes > flushes + 1)
        db = sqlite3.connect(p.db)
        runs = {r for (r,) in db.execute("SELECT run FROM runs")}
        assert "victim" in runs and not runs & {"unwritable", "unencodable"}
        kinds = {k for (k,) in db.execute("SELECT kind FROM alerts WHERE run = 'victim'")}
        assert "nonfinite" in kinds

    def test_readyz_turns_red_when_nothing_can_be_written(self, tmp_path):
        asyncio.run(self._failing(tmp_path))

    async def _failing(self, tmp_path):
        async with InProcess(tmp_path) as p:
            srv = p.server
            assert await asyncio.to_thread(p.readyz) == 200
            emit = connect(p.endpoint, run="r")
            emit.loss(1, 2.0)
            assert await asyncio.to_thread(emit.flush, 10)
            srv.store._conn.execute("PRAGMA query_only = 1")  # every write now fails
            for step in range(2, 200):
                emit.loss(step, 2.0)
                await asyncio.sleep(0.005)
            await until(lambda: srv.store.failing, what="the store failing")
            assert await asyncio.to_thread(p.readyz) == 503
            srv.store._conn.execute("PRAGMA query_only = 0")
            emit.loss(500, 2.0)
            await until(lambda: not srv.store.failing, what="the store recovering")
            assert await asyncio.to_thread(p.readyz) == 200
            emit.close()

    def test_a_failed_alert_commit_is_tried_again(self, tmp_path):
        """The alert's transaction fails twice (a SQLite function raising in a trigger on the
        journal): it is tried again and the alert, its outbox row and its delivery go through."""
        asyncio.run(self._flaky_alert(tmp_path))

    async def _flaky_alert(self, tmp_path):
        async with InProcess(tmp_path) as p:
            srv = p.server
            fails = [2]

            def flaky() -> int:
                if fails[0] > 0:
                    fails[0] -= 1
                    raise sqlite3.OperationalError("disk I/O error (injected)")
                return 0

            srv.store._conn.create_function("flaky", 0, flaky)
            srv.store._conn.execute("CREATE TEMP TRIGGER flaky_alerts BEFORE INSERT ON alerts "
                                    "BEGIN SELECT flaky(); END")
            emit = connect(p.endpoint, run="victim")
            for step in range(1, 10):
                emit.loss(step, 2.0)
            emit.loss(10, float("nan"))
            assert await asyncio.to_thread(emit.flush, 10)
            await until(lambda: srv.delivery.counters.values[("log", "success")] == 1, what="the alert delivered")
            assert fails == [0] and srv.alerts.journal_errors == 2 and srv.delivery.counters.lost == 0
            emit.close()
        db = sqlite3.connect(p.db)
        assert db.execute("SELECT count(*) FROM alerts a JOIN deliveries d ON d.key = a.key "
                          "WHERE a.run = 'victim' AND a.kind = 'nonfinite'").fetchone()[0] == 1
