"""Runs coming back from the store (daemon/restores.py) with a real SQLite file, off the loop."""

from __future__ import annotations

import asyncio
import time

from helpers import admit_seq, until
from wtwin.daemon.admission import Admission
from wtwin.daemon.config import RunsConfig
from wtwin.daemon.emitter_link import EmitterLink
from wtwin.daemon.quarantine import Quarantine
from wtwin.daemon.restores import MAX_HELD_EVENTS, Restores
from wtwin.daemon.run_table import RunTable
from wtwin.daemon.snapshots import Snapshots
from wtwin.daemon.stats import Stats
from wtwin.daemon.store.config import StateConfig
from wtwin.daemon.store.store import Store


class Graph:
    """The store-facing part of the daemon's graph, built as daemon/wiring.py does."""

    def __init__(self, path: str, runs: RunsConfig = RunsConfig()) -> None:
        self.cfg = StateConfig(path=path, flush_interval_s=60)
        self.stats = Stats()
        self.table = RunTable(preset="pretraining", cooldown_s=0.0, max_runs=100)
        self.store = Store(self.cfg)
        send = lambda identity, frame: True  # noqa: E731
        self.link = EmitterLink(self.stats, send)
        self.snapshots = Snapshots(self.cfg, self.store, self.link, self.table, self.stats,
                                   Quarantine(self.stats, send))
        self.restores = Restores(self.store, self.table, self.stats)
        self.admission = Admission(runs, self.table, self.stats, send, curve=False,
                                   restore=self.restores.fill)
        self.handled: list[int] = []

    def handle(self, identity: bytes, ev: dict, now: float, user=None) -> None:
        """What Server.handle_event does with an event, the detectors aside."""
        principal = self.admission.principal_of(ev.pop("auth", None), user)
        run = self.admission.admit(ev["run"], ev.get("emitter"), identity, principal, now)
        if run is not None and admit_seq(self.link, run, ev, identity, now):
            self.handled.append(ev["seq"])

    def feed(self, name: str, steps) -> None:
        for step in steps:
            ev = {"v": 1, "type": "loss", "run": name, "seq": step, "step": step,
                  "loss": 2.0 + 1.0 / step, "emitter": "em"}
            run = self.table.get_or_create(name, time.time())
            assert admit_seq(self.link, run, ev, b"id", time.time())
            run.observe(ev, time.time())
            self.snapshots.changed(run)

    async def settle(self) -> None:
        """Everything queued so far has committed and its callbacks ran."""
        await self.store.execute(lambda conn: None, full=False)
        self.store.writer.poll_completed()

    async def close(self) -> None:
        self.snapshots.close()
        await self.store.close()


class TestStartup:
    def test_live_runs_come_back_and_every_stored_name_is_known(self, tmp_path):
        """load() restores runs live by the TTLs (off the loop) and learns every stored name,
        including runs too old to load, so their next event brings them back."""
        async def scenario():
            g = Graph(str(tmp_path / "s.db"))
            g.store.open(asyncio.get_running_loop())
            g.feed("live", range(1, 51))
            g.feed("old", range(1, 11))
            g.table.get("old").last_seen = time.time() - 10_000
            g.snapshots.flush()
            await g.settle()
            await g.close()

            h = Graph(str(tmp_path / "s.db"))
            h.store.open(asyncio.get_running_loop())
            n = await h.restores.load(time.time(), idle_ttl_s=600, ended_ttl_s=600)
            assert n == 1 and h.table.get("live").step == 50 and h.table.get("old") is None
            assert h.table.get("live").marks.hwm == {"em": 50}
            assert h.store.runs == {"live", "old"}
            await h.close()

        asyncio.run(scenario())


class TestHeldWhileRead:
    def test_an_evicted_run_is_read_back_off_the_loop_and_its_held_events_run_in_order(self, tmp_path):
        """The event for a stored run not in memory waits (hold -> True, the run still
        absent: nothing was read on the loop); the row is read behind the eviction's own
        write, admission creates the run and fills it, and the held events go through in
        arrival order."""
        async def scenario():
            g = Graph(str(tmp_path / "s.db"))
            g.store.open(asyncio.get_running_loop())
            g.feed("r", range(1, 101))
            g.snapshots.evict(g.table.forget("r"))  # its write is queued, not yet committed
            for seq in (101, 102, 103):
                ev = {"type": "loss", "run": "r", "seq": seq, "emitter": "em"}
                assert g.restores.hold("r", (b"id", ev, time.time(), None), g.handle)
            assert g.table.get("r") is None and g.handled == []
            await until(lambda: (g.store.writer.poll_completed(), g.handled)[1], what="the held events")
            assert g.handled == [101, 102, 103]  # in order, none taken for a duplicate or a gap
            back = g.table.get("r")
            assert back.step == 100 and back.marks.hwm == {"em": 103} and back.events == 100  # events: observed only
            assert back.creator == b"id" and g.admission.per_client[b"id"] == 1  # charged as new
            ev = {"type": "loss", "run": "r", "seq": 104, "emitter": "em"}
            assert not g.restores.hold("r", (b"id", ev, time.time(), None), g.handle)  # in memory now
            await g.close()

        asyncio.run(scenario())

    def test_a_client_over_its_run_quota_restores_nothing(self, tmp_path):
        """A stored run's held events from a client at its quota are refused by admission
        as for any new run: the run stays out of memory and its row is not kept."""
        async def scenario():
            g = Graph(str(tmp_path / "s.db"), RunsConfig(max_runs_per_client=1))
            g.store.open(asyncio.get_running_loop())
            g.feed("r", range(1, 3))
            g.snapshots.evict(g.table.forget("r"))
            g.handle(b"greedy", {"type": "loss", "run": "other", "seq": 1, "emitter": "o"}, time.time())
            ev = {"type": "loss", "run": "r", "seq": 3, "emitter": "em"}
            assert g.restores.hold("r", (b"greedy", ev, time.time(), None), g.handle)
            await until(lambda: (g.store.writer.poll_completed(), not g.restores.pending)[1],
                        what="the row read")
            assert g.table.get("r") is None and g.stats.dropped["client_run_quota"] == 1
            assert g.restores._fetched == {}
            await g.close()

        asyncio.run(scenario())

    def test_unknown_runs_are_not_held_and_a_full_hold_drops_counted(self, tmp_path):
        """A run the store never had goes straight through; past MAX_HELD_EVENTS a held
        run's events are dropped and counted ``restoring`` (its emitter re-sends them)."""
        async def scenario():
            g = Graph(str(tmp_path / "s.db"))
            g.store.open(asyncio.get_running_loop())
            assert not g.restores.hold("new", (b"id", {}, 0.0, None), print)
            g.feed("r", range(1, 3))
            g.snapshots.evict(g.table.forget("r"))
            ran = []
            for _ in range(MAX_HELD_EVENTS + 5):
                assert g.restores.hold("r", (b"id", {}, time.time(), None), lambda *item: ran.append(1))
            assert g.stats.dropped["restoring"] == 5
            await until(lambda: (g.store.writer.poll_completed(), len(ran))[1] == MAX_HELD_EVENTS,
                        what="the held events")
            await g.close()

        asyncio.run(scenario())


class TestThaw:
    def test_an_unreadable_detector_snapshot_is_counted_and_the_run_goes_on(self, tmp_path):
        """thaw() before a restored run's first event: garbage in the stored detector
        bytes is logged and counted; the run has fresh detectors and takes the event."""
        from wtwin.daemon.store import codec

        g = Graph(str(tmp_path / "s.db"))
        run = g.table.get_or_create("r", 1.0)
        run.freeze(codec.Frozen(b"\xc1 not msgpack"))
        g.restores.thaw(run)
        assert g.stats.loop_errors == 1 and run.thawed and run.frozen is None
        assert run.observe({"type": "loss", "step": 1, "loss": 2.0}, 2.0) == []
        g.restores.thaw(run)  # nothing frozen: nothing to do
        assert g.stats.loop_errors == 1
