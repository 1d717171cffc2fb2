"""The SQLite store: open-time checks, migrations, writer batches, snapshots, outbox reload."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys

import msgpack
import pytest

from helpers import Daemon, free_port, until
from wtwin.daemon.errors import ConfigError
from wtwin.daemon.run_state import RunState
from wtwin.daemon.store import codec
from wtwin.daemon.store.db import SCHEMA_VERSION, open_db
from wtwin.daemon.store.deliveries import SqliteOutbox
from wtwin.daemon.store.writer import Writer
from wtwin.detect.alert import Alert


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def start_daemon(db, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, WTWIND_STATE__PATH=str(db), WTWIND_HTTP__PORT=str(free_port()),
               WTWIND_LISTEN__ENDPOINTS=f"ipc://{tmp_path}/s.sock", WTWIND_LOG__FORMAT="json")
    return subprocess.run([sys.executable, "-m", "wtwin.daemon.cli"], env=env, capture_output=True,
                          text=True, timeout=60)


class TestOpen:
    def test_fresh_database_gets_the_current_schema_in_wal_mode(self, tmp_path):
        """A new file is created, migrated to SCHEMA_VERSION and switched to WAL."""
        conn, lock = open_db(str(tmp_path / "s.db"))
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        lock.release()

    def test_newer_schema_is_a_clear_error_and_the_file_is_untouched(self, tmp_path):
        """A database from a newer wtwind is refused, naming the file; nothing is written."""
        path = tmp_path / "s.db"
        c = sqlite3.connect(path)
        c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        c.close()
        before = digest(path)
        with pytest.raises(ConfigError, match=f"{path}.*newer"):
            open_db(str(path))
        assert digest(path) == before

    def test_corrupt_file_is_refused_naming_it(self, tmp_path):
        """Garbage where the database should be: a clear error, the garbage kept as is."""
        path = tmp_path / "s.db"
        path.write_bytes(b"definitely not sqlite" * 300)
        before = digest(path)
        with pytest.raises(ConfigError, match=str(path)):
            open_db(str(path))
        assert digest(path) == before

    def test_second_owner_is_refused_while_the_first_holds_it(self, tmp_path):
        """One daemon per database: the owner lock makes the second a clear error."""
        path = str(tmp_path / "s.db")
        _conn, lock = open_db(path)
        with pytest.raises(ConfigError, match="locked by another process"):
            open_db(path)
        lock.release()
        open_db(path)[1].release()

    def test_sqlite_write_lock_held_elsewhere_is_a_clear_error(self, tmp_path):
        """Another process holding SQLite's write lock during migration: 'locked', not a hang."""
        path = str(tmp_path / "s.db")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(ConfigError, match="locked"):
            open_db(path, busy_timeout_s=0.2)
        other.execute("ROLLBACK")

    def test_unusable_directory_is_a_clear_error(self, tmp_path):
        """A path whose parent is a file cannot be created: the error names it."""
        (tmp_path / "afile").write_text("x")
        with pytest.raises(ConfigError, match="cannot create directory"):
            open_db(str(tmp_path / "afile" / "s.db"))


class TestDaemonStart:
    def test_corrupt_store_stops_the_daemon_with_a_message(self, tmp_path):
        """wtwind exits non-zero, names the file on stderr, and leaves the file as it was."""
        db = tmp_path / "bad.db"
        db.write_bytes(os.urandom(8192))
        before = digest(db)
        proc = start_daemon(db, tmp_path)
        assert proc.returncode != 0
        assert str(db) in proc.stderr
        assert digest(db) == before

    def test_disk_full_at_start_stops_the_daemon_naming_the_file(self, tmp_path):
        """No room to create the schema (a 4 KiB file-size limit): exit 1, file named."""
        import resource
        import signal

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

        db = tmp_path / "full.db"
        env = dict(os.environ, WTWIND_STATE__PATH=str(db), WTWIND_HTTP__PORT=str(free_port()),
                   WTWIND_LISTEN__ENDPOINTS=f"ipc://{tmp_path}/s.sock")
        proc = subprocess.run([sys.executable, "-m", "wtwin.daemon.cli"], env=env, preexec_fn=limit,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1
        assert str(db) in proc.stderr and ("disk" in proc.stderr or "full" in proc.stderr)

    def test_locked_store_stops_the_second_daemon(self, tmp_path):
        """A second wtwind on the same database exits non-zero saying it is locked."""
        db = tmp_path / "s.db"
        (tmp_path / "a").mkdir()
        with Daemon(extra_env={"WTWIND_STATE__PATH": str(db)}, tmpdir=str(tmp_path / "a")):
            proc = start_daemon(db, tmp_path)
        assert proc.returncode != 0 and "locked" in proc.stderr and str(db) in proc.stderr


class TestWriter:
    def test_a_failing_batch_is_rolled_back_entirely(self, tmp_path):
        """Operations batched together commit together or not at all."""
        conn, lock = open_db(str(tmp_path / "s.db"))

        async def go():
            w = Writer(conn, asyncio.get_running_loop())
            ok = w.call(lambda c: c.execute("INSERT INTO runs VALUES ('a','running','p','{}',1,1,1,NULL,1)"))
            bad = w.call(lambda c: c.execute("INSERT INTO nosuchtable VALUES (1)"))
            results = await asyncio.gather(ok, bad, return_exceptions=True)
            w.close()
            return results

        results = asyncio.run(go())
        assert isinstance(results[1], sqlite3.Error)
        n = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        assert (n == 0) == isinstance(results[0], Exception)  # same batch -> both failed
        lock.release()


    def test_reads_that_succeed_while_writes_fail_do_not_hide_the_failure(self, tmp_path):
        """A restore's read commits even on a read-only database; "failing" (/readyz red)
        is judged on batches with writes, so three failed write batches still say so."""
        conn, lock = open_db(str(tmp_path / "s.db"))
        conn.execute("PRAGMA query_only = 1")

        async def go():
            w = Writer(conn, asyncio.get_running_loop())
            for _ in range(3):
                read = asyncio.get_running_loop().create_future()
                w.submit(lambda c: c.execute("SELECT count(*) FROM runs").fetchone(), read=True,
                         done=lambda res, err, fut=read: fut.set_result((res, err)))
                write = w.call(lambda c: c.execute("INSERT INTO runs VALUES ('a','running','p','{}',1,1,1,NULL,1)"))
                got = await asyncio.gather(read, write, return_exceptions=True)
                assert got[0] == ((0,), None) and isinstance(got[1], sqlite3.Error)
            try:  # the count moves just after the callbacks are handed over: poll
                await until(lambda: w.failing, timeout=5, what="the writer failing")
            finally:
                w.close()

        asyncio.run(go())
        lock.release()


class TestSnapshot:
    def test_the_seq_marks_are_one_stored_value_and_a_format_2_snapshot_still_restores(self):
        """Format 3 stores ``EmitterMarks`` (marks and last-sent times) as one value; a
        format-2 snapshot, which kept only ``hwm``, restores the same marks."""
        a = RunState("r", preset="pretraining", cooldown_s=0.0, now=1.0)
        a.marks.sent("em", b"conn", 7.0)
        assert a.marks.admit_seq("em", 41, None) == 0
        d = msgpack.unpackb(codec.encode(a)[7], raw=False)
        assert d["format"] == 3 and d["marks"] == {"hwm": {"em": 41}, "seen": {"em": 7.0}} and "hwm" not in d
        b = RunState("r", preset="pretraining", cooldown_s=0.0, now=5.0)
        codec.restore(b, "{}", codec.encode(a)[7])
        assert (b.marks.hwm, b.marks.seen, b.marks.identities) == ({"em": 41}, {"em": 7.0}, {})
        old = {k: v for k, v in d.items() if k != "marks"} | {"format": 2, "hwm": {"em": 41}}
        c = RunState("r", preset="pretraining", cooldown_s=0.0, now=5.0)
        codec.restore(c, "{}", msgpack.packb(old, use_bin_type=True))
        assert (c.marks.hwm, c.marks.seen) == ({"em": 41}, {})
        assert c.marks.admit_seq("em", 41, None) == -1 and c.marks.admit_seq("em", 42, None) == 0

    def test_run_state_round_trips_through_the_codec(self):
        """A restored run continues exactly where the snapshot was taken."""
        a = RunState("r", preset="pretraining", cooldown_s=0.0, now=1.0)
        for step in range(1, 400):
            a.observe({"type": "loss", "step": step, "loss": 3.0 / step ** 0.3}, 2.0)
        a.marks.admit_seq("em", 399, None)
        row = codec.encode(a)
        b = RunState("r", preset="pretraining", cooldown_s=0.0, now=5.0)
        codec.restore(b, row[3], row[7])
        assert b.monitor.snapshot() == a.monitor.snapshot()
        assert (b.step, b.marks.hwm, b.first_seen) == (399, {"em": 399}, 1.0)
        for step in range(400, 600):
            ev = {"type": "loss", "step": step, "loss": 3.0 / step ** 0.3 + (0.5 if step > 500 else 0)}
            assert [x.kind for x in a.observe(ev, 3.0)] == [x.kind for x in b.observe(ev, 3.0)]


    def test_sparkline_and_rewinds_ride_in_the_snapshot(self):
        """The history pages read both from the stored row; a restore brings them back."""
        a = RunState("r", preset="pretraining", cooldown_s=0.0, now=1.0)
        for step in range(1, 301):
            a.observe({"type": "loss", "step": step, "loss": 3.0 / step ** 0.3}, 2.0)
        a.observe({"type": "rewind", "step": 200, "from_step": 300, "kind": "divergence",
                   "checkpoint": "/ckpt/step-200.pt", "count": 1}, 2.5)
        row = codec.encode(a)
        b = RunState("r", preset="pretraining", cooldown_s=0.0, now=5.0)
        codec.restore(b, row[3], row[7])
        assert b.spark.points() == a.spark.points() and 32 <= len(a.spark.points()) <= 64
        assert [(r["step"], r["from_step"], r["checkpoint"]) for r in b.rewinds] == [(200, 300, "step-200.pt")]


class TestLazyRestore:
    def _trained(self, steps=400) -> RunState:
        a = RunState("r", preset="finetuning", cooldown_s=0.0, now=1.0)
        for step in range(1, steps):
            a.observe({"type": "loss", "step": step, "loss": 3.0 / step ** 0.3}, 2.0)
        return a

    def test_restore_leaves_the_detectors_frozen_until_first_use(self):
        """Status, step and preset are back at once; the detectors' state is decoded only
        when the run needs it, and is then exactly what was stored."""
        a = self._trained()
        row = codec.encode(a)
        b = RunState("r", preset="pretraining", cooldown_s=0.0, now=5.0)
        codec.restore(b, row[3], row[7])
        assert not b.thawed and b.frozen is not None
        assert (b.status, b.step, b.preset, b.loss) == ("running", 399, "finetuning", a.loss)
        assert b.monitor.snapshot() == a.monitor.snapshot()
        assert b.thawed and b.frozen is None

    def test_a_run_written_again_before_thawing_keeps_its_detector_state(self):
        """Encoding a never-thawed run writes the stored detector bytes back unchanged."""
        a = self._trained()
        row = codec.encode(a)
        b = RunState("r", preset="finetuning", cooldown_s=0.0, now=5.0)
        codec.restore(b, row[3], row[7])
        again = codec.encode(b)
        assert not b.thawed
        assert codec.decode(again[7])["monitor"] == codec.decode(row[7])["monitor"]

    def test_format_1_snapshots_are_still_read(self):
        """A snapshot written by the previous format (monitor inline) restores the same."""
        import msgpack

        a = self._trained()
        d = codec.decode(codec.encode(a)[7])
        d["format"] = 1
        old = msgpack.packb(d, use_bin_type=True)
        b = RunState("r", preset="finetuning", cooldown_s=0.0, now=5.0)
        codec.restore(b, "{}", old)
        assert b.monitor.snapshot() == a.monitor.snapshot()

    def test_an_unreadable_detector_snapshot_raises_and_leaves_fresh_detectors(self):
        """thaw() of garbage raises; the run keeps working with new detectors."""
        b = RunState("r", preset="pretraining", cooldown_s=0.0, now=5.0)
        b.freeze(codec.Frozen(b"\xc1 not msgpack"))
        with pytest.raises(Exception):
            b.thaw()
        assert b.thawed and b.monitor.snapshot() == RunState("x", preset="pretraining", cooldown_s=0.0,
                                                             now=0.0).monitor.snapshot()
        assert b.observe({"type": "loss", "step": 1, "loss": 2.0}, 6.0) == []


def _layer(name: str, alpha: float):
    from wtwin.daemon.spectral.result import LayerResult

    return LayerResult(name=name, kind="dense", n=128, m=64, rf=1, num_evals=64, status="ok", alpha=alpha,
                       alpha_weighted=alpha * 0.9, xmin=0.1, num_pl_spikes=3, D=0.05, sigma=0.2,
                       lambda_max=9.0, stable_rank=4.0, log_norm=1.0, log_spectral_norm=0.9, detX_num=2,
                       erg_gap=1)


class TestSpectralInTheSnapshot:
    def _service(self, changed):
        from wtwin.daemon.jobs.config import JobsConfig
        from wtwin.daemon.jobs.service import JobsCollector, SpectralService, watch_factory
        from wtwin.daemon.run_table import RunTable

        table = RunTable(preset="pretraining", cooldown_s=0.0, max_runs=10,
                         new_watch=watch_factory(JobsConfig()))
        table.get_or_create("r", 1.0)
        svc = SpectralService(JobsConfig(), table, publish=lambda a: None, send=lambda i, f: None,
                              changed=changed)
        return svc, table, JobsCollector(svc.runner, table)

    def test_a_result_marks_the_run_and_comes_back_from_its_snapshot(self):
        """A finished job says its run changed; the watch and last result live on the run,
        ride in its snapshot and restore to the same /metrics families."""
        from wtwin.daemon.jobs.model import JobResult

        changed = []
        svc, table, metrics = self._service(lambda run: changed.append(run.run))
        svc.on_result(JobResult(run="r", step=50, path="/ck/c50.pt", want=("analyze",), epoch=None,
                                outcome="ok", layers=(_layer("a", 3.0), _layer("b", 7.5))))
        assert changed == ["r"]
        a = table.get("r")
        row = codec.encode(a)
        svc2, table2, metrics2 = self._service(lambda run: None)
        b = table2.get("r")
        codec.restore(b, row[3], row[7])
        assert b.spectral.last == a.spectral.last and b.spectral.last.step == 50
        assert b.spectral_result == a.spectral_result

        def families(collector):
            return [(f.name, sorted((x.name, sorted(x.labels.items()), x.value) for x in f.samples))
                    for f in collector.run_families()]
        assert families(metrics2) == families(metrics) and any(f[1] for f in families(metrics))

    def test_a_snapshot_written_before_spectral_lived_on_the_run_restores_the_same(self):
        """The stored shape is unchanged: {"spectral": {"watch", "last_result"}} as the
        service wrote it into the snapshot before (format 2), read into the run."""
        from wtwin.daemon.spectral.health import SpectralWatch

        w = SpectralWatch()
        w.update(7, [_layer("a", 3.0)])
        a = RunState("r", preset="pretraining", cooldown_s=0.0, now=1.0)
        blob = msgpack.packb({**codec.snapshot(a), "spectral": {"watch": w.snapshot(),
                                                                 "last_result": {"step": 7}}},
                             use_bin_type=True)
        b = RunState("r", preset="pretraining", cooldown_s=0.0, now=1.0)
        codec.restore(b, "{}", blob)
        assert b.spectral.last == w.last and b.spectral_result == {"step": 7}


class TestOutboxDurability:
    def test_pending_and_dead_rows_come_back_after_reopen(self, tmp_path):
        """What was committed is there after closing and reopening the file."""
        path = tmp_path / "o.db"
        alert = Alert(run="r", kind="drift", severity="warning", status="firing", step=3, started_at=9.0)

        async def first():
            box = SqliteOutbox(path)
            rows = await box.put(alert, ["a", "b"], now=1.0)
            await box.record(rows[1].id, state="dead", attempts=5, next_attempt_at=1.0, error="HTTP 500", now=2.0)
            await box.aclose()

        async def second():
            box = SqliteOutbox(path)
            try:
                return await box.due("a", 10.0, 10), box.counts(), await box.dead()
            finally:
                await box.aclose()

        asyncio.run(first())
        due, counts, dead = asyncio.run(second())
        assert [r.alert for r in due] == [alert]
        assert counts == {("a", "pending"): 1, ("b", "dead"): 1}
        assert dead[0].last_error == "HTTP 500"


