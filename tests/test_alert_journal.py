"""The alert journal: one transaction per alert, its alert row written once.

A real in-process ``Server`` (ROUTER socket, SQLite store, the default ``log`` sink) and
a real emitter; SQLite's own statement trace on the store's connection shows what each
transaction held.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading

from helpers import until
from wtwin.daemon.config import DaemonConfig, HttpConfig, ListenConfig
from wtwin.daemon.server import Server
from wtwin.daemon.store.config import StateConfig
from wtwin.emitters import connect
from wtwin.sinks.registry import DeliveryConfig


def server(tmp_path, **kw) -> tuple[Server, str]:
    cfg = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/j.sock",)), http=HttpConfig(port=0),
                       state=StateConfig(path=str(tmp_path / "j.db"), flush_interval_s=0.05), **kw)
    return Server(cfg), cfg.listen.endpoints[0]


def transactions(trace: list[str]) -> list[list[str]]:
    """The traced statements cut into transactions (BEGIN .. COMMIT)."""
    out, cur = [], None
    for sql in trace:
        head = sql.strip().upper()
        if head.startswith("BEGIN"):
            cur = []
        elif head.startswith("COMMIT") and cur is not None:
            out.append(cur)
            cur = None
        elif cur is not None:
            cur.append(head)
    return out


def delivered(srv: Server) -> int:
    return srv.delivery.counters.values[("log", "success")]


class TestOneTransaction:
    def test_an_alert_is_one_full_commit_with_its_row_written_once(self, tmp_path):
        """The alert row (once), the run's snapshot and the outbox row commit together, in
        the one synchronous=FULL commit of that alert."""
        asyncio.run(self._one(tmp_path))

    async def _one(self, tmp_path):
        srv, endpoint = server(tmp_path)
        await srv.startup(asyncio.get_running_loop())
        try:
            emit = connect(endpoint, run="victim")
            for step in range(1, 10):
                emit.loss(step, 2.0)
            assert await asyncio.to_thread(emit.flush, 10)
            trace: list[str] = []
            srv.store._conn.set_trace_callback(trace.append)  # runs on the writer thread
            full = srv.store.writer.full_commits
            emit.loss(10, float("nan"))
            await until(lambda: delivered(srv) == 1, what="the alert delivered")
            assert srv.store.writer.full_commits - full == 1
            srv.store._conn.set_trace_callback(None)
            (tx,) = [t for t in transactions(list(trace)) if any("INTO ALERTS" in s for s in t)]
            assert sum("INTO ALERTS" in s for s in tx) == 1
            assert any("INTO RUNS" in s for s in tx) and any("INTO DELIVERIES" in s for s in tx)
            emit.close()
        finally:
            await srv.shutdown()
        db = sqlite3.connect(tmp_path / "j.db")
        assert db.execute("SELECT count(*) FROM alerts WHERE run = 'victim'").fetchone()[0] == 1

    def test_an_alert_past_the_intake_is_journaled_without_outbox_rows(self, tmp_path):
        """With the intake full (one alert waiting for its commit) the next alert goes to no
        sink (ERROR, counted) but its alert row is still written, with its run's snapshot."""
        asyncio.run(self._past_intake(tmp_path))

    async def _past_intake(self, tmp_path):
        srv, endpoint = server(tmp_path, delivery=DeliveryConfig(intake_size=1))
        await srv.startup(asyncio.get_running_loop())
        try:
            started, busy = threading.Event(), threading.Event()
            srv.store.writer.submit(lambda conn: started.set() or busy.wait(10))  # the disk is slow
            await until(started.is_set, what="the writer busy")
            emitters = [connect(endpoint, run=run) for run in ("first", "second")]
            for emit in emitters:
                for step in range(1, 10):
                    emit.loss(step, 2.0)
                emit.loss(10, float("nan"))
            await until(lambda: srv.delivery.counters.intake_dropped == 1, what="the second alert past the intake")
            busy.set()
            await until(lambda: delivered(srv) == 1, what="the first alert delivered")
            for emit in emitters:
                assert await asyncio.to_thread(emit.flush, 10)
                emit.close()
        finally:
            await srv.shutdown()
        db = sqlite3.connect(tmp_path / "j.db")
        assert db.execute("SELECT count(*) FROM alerts").fetchone()[0] == 2
        assert db.execute("SELECT count(*) FROM deliveries").fetchone()[0] == 1
        assert db.execute("SELECT count(*) FROM runs WHERE snapshot IS NOT NULL").fetchone()[0] == 2
