"""A run's history kept with it (issue 23) and the store's disk budget (issue 24): the
min/max envelope, its rows in a real SQLite file, pruning, and a real wtwind whose stored
page shows what its live page showed."""

from __future__ import annotations

import json
import math
import sqlite3
import time

import msgpack
import numpy as np
import pytest

from helpers import Daemon, http_get, wait_for
from wtwin.daemon.config import load
from wtwin.daemon.errors import ConfigError
from wtwin.daemon.run_state import RunState
from wtwin.daemon.store import codec, envelope, history, retention, series_rows
from wtwin.daemon.store.config import StateConfig
from wtwin.daemon.store.db import open_db
from wtwin.daemon.store.run_rows import write_runs
from wtwin.emitters import connect


def raw(n: int, k: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vals = rng.normal(size=(n, k))
    vals[::7, 1] = np.nan
    vals[n // 3, 0] = 50.0                  # one-step peaks
    vals[n // 2, 2] = -40.0
    return np.hstack([np.arange(n, dtype=float)[:, None], vals])


def check_contract(blk: np.ndarray, rows: np.ndarray) -> None:
    """Each bucket's min and max are those of the raw points in its steps, in their order."""
    k = rows.shape[1] - 1
    for b in blk:
        inside = rows[(rows[:, 0] >= b[0]) & (rows[:, 0] <= b[1]), 1:]
        for j in range(k):
            col = inside[:, j]
            fin = col[np.isfinite(col)]
            if not len(fin):
                assert np.isnan(b[2 + j]) and np.isnan(b[2 + k + j])
                continue
            assert b[2 + j] == pytest.approx(fin.min(), rel=1e-6) and b[2 + k + j] == pytest.approx(fin.max(), rel=1e-6)
            first_min, first_max = np.flatnonzero(col == fin.min())[0], np.flatnonzero(col == fin.max())[0]
            if first_min != first_max:
                assert (b[2 + 2 * k + j] > 0.5) == (first_min < first_max)


class TestEnvelope:
    def test_buckets_hold_the_min_and_max_of_their_steps_and_stay_within_floor_to_twice(self):
        rows = raw(50_000)
        env = envelope.Envelope(("a", "b", "c"), floor=100)
        blocks = []
        for i in range(0, len(rows), 64):
            env.add(rows[i:i + 64])
            if i % 1024 == 0:            # a write now and then: buckets meet where writes met
                blocks.append(env.take().buckets())
        blocks.append(env.take().buckets())
        blk = envelope.rebin(np.concatenate(blocks), env.width)    # what a compaction writes
        assert 100 <= len(blk) <= 200 and env.width == 256
        check_contract(np.concatenate(blocks), rows)
        check_contract(envelope.decode(envelope.encode(blk)), rows)
        assert blk[:, 5].max() == 50.0 and blk[:, 4].min() == -40.0

    def test_rows_waiting_for_a_lagging_snapshot_are_bucketed_and_bounded(self):
        rows = raw(20_000)
        env = envelope.Envelope(("a", "b", "c"), floor=100)
        for i in range(0, len(rows), 64):
            env.add(rows[i:i + 64])
            assert env._nraw < env.MAX_RAW and (env._squashed is None or len(env._squashed) <= 2 * env.floor)
        blk = env.take().buckets()
        assert 100 <= len(blk) <= 200
        check_contract(blk, rows)

    def test_columns_draw_each_bucket_as_its_two_extremes_in_order(self):
        env = envelope.Envelope(("v",), floor=1)
        env.add(np.array([[0, 1.0], [1, 9.0], [2, 0.0], [3, 5.0], [4, 2.0], [5, 2.0], [6, 7.0], [7, 3.0]]))
        blk = env.take().buckets()
        cols = envelope.columns(blk, ("v",))
        assert env.width == 4     # [9 then 0] in steps 0-3, [2 then 7] in steps 4-7
        assert cols["step"].tolist() == [0, 3, 4, 7] and cols["v"].tolist() == [9.0, 0.0, 2.0, 7.0]

    def test_a_resume_drops_the_buckets_from_its_step_on(self):
        env = envelope.Envelope(("v",), floor=1000)
        env.add(np.array([[t, float(t)] for t in range(100)]))
        env.truncate(40)
        chunk = env.take()
        assert chunk.truncate == 40 and chunk.buckets()[:, 0].max() < 40


def _store(tmp_path):
    conn, lock = open_db(str(tmp_path / "w.db"))
    return str(tmp_path / "w.db"), conn, lock


def _write(conn, run) -> None:
    conn.execute("BEGIN")
    assert write_runs(conn, [codec.encode(run)]) == {}
    conn.execute("COMMIT")


def _feed(run: RunState, steps, every: int, conn, lr=lambda t: 3e-4, loss=lambda t: 3.0 / (1 + t) ** 0.3):
    for t in steps:
        run.observe_loss(t, loss(t), lr(t), 1.0, None, float(t))
        if t % every == 0:
            _write(conn, run)
    _write(conn, run)


class TestStoredRows:
    def test_a_long_run_is_stored_in_few_rows_with_its_peaks(self, tmp_path):
        path, conn, lock = _store(tmp_path)
        run = RunState("r", preset="pretraining", cooldown_s=60, now=0.0)
        _feed(run, range(1, 20_001), 500, conn, lr=lambda t: 3e-2 if t == 12_345 else 3e-4,
              loss=lambda t: 9.0 if t == 7_777 else 3.0 / (1 + t) ** 0.3)
        nrows, nb = conn.execute("SELECT COUNT(*), SUM(n) FROM series WHERE kind = 'train'").fetchone()
        assert nrows <= series_rows.MAX_SMALL + 2 and 1024 <= nb + 1 <= 2048
        rec = history.run_record(path, "r")
        s = rec["series"]
        assert len(s["step"]) >= 2000 and s["step"][-1] == 20_000
        assert max(s["lr"]) == pytest.approx(3e-2, rel=1e-6) and max(s["loss"]) == pytest.approx(9.0, rel=1e-6)
        assert all(a < b for a, b in zip(s["step"], s["step"][1:]))
        lock.release()

    def test_history_carries_on_across_a_restore(self, tmp_path):
        path, conn, lock = _store(tmp_path)
        a = RunState("r", preset="pretraining", cooldown_s=60, now=0.0)
        _feed(a, range(1, 3001), 1000, conn)
        b = RunState("r", preset="pretraining", cooldown_s=60, now=0.0)
        row = conn.execute("SELECT config, snapshot FROM runs WHERE run = 'r'").fetchone()
        codec.restore(b, *row)
        _feed(b, range(3001, 6001), 1000, conn, loss=lambda t: 8.0 if t == 4500 else 1.0)
        s = history.run_record(path, "r")["series"]
        assert s["step"][0] <= 2 and s["step"][-1] == 6000 and max(s["loss"]) == pytest.approx(8.0)
        assert len(s["step"]) >= 2000
        lock.release()

    def test_a_resumed_run_keeps_what_came_before_its_resume_step(self, tmp_path):
        path, conn, lock = _store(tmp_path)
        run = RunState("r", preset="pretraining", cooldown_s=60, now=0.0)
        _feed(run, range(1, 5001), 1000, conn, loss=lambda t: 7.0 if t == 4000 else 1.0)
        _feed(run, range(3000, 3500), 1000, conn)
        s = history.run_record(path, "r")["series"]
        assert s["step"][-1] == 3499 and max(s["loss"]) < 7.0
        lock.release()


class TestMigration:
    def test_a_schema_2_store_gains_the_series_table_and_its_runs_keep_their_sparkline(self, tmp_path):
        from wtwin.daemon.store.db import MIGRATIONS
        from wtwin.daemon.web import views

        path = str(tmp_path / "old.db")
        conn = sqlite3.connect(path)
        for script in MIGRATIONS[:2]:
            conn.executescript(script)
        r = RunState("old", preset="pretraining", cooldown_s=60, now=1.0)
        for t in range(1, 201):
            r.observe_loss(t, 1.0 / t, 3e-4, None, None, 1.0)
        row = list(codec.encode(r))
        snap = codec.decode_head(row[7])
        del snap["history"]                       # as a schema-2 daemon wrote it
        row[7] = msgpack.packb(snap, use_bin_type=True)
        conn.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)", (*row, 1.0))
        conn.execute("PRAGMA user_version = 2")
        conn.commit()
        conn.close()
        conn, lock = open_db(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        rec = history.run_record(path, "old")
        page = views.stored_detail(rec)
        assert rec["series"] is None and 2 <= len(page["series"]["step"]) <= 64
        lock.release()


def _row(conn, name, last_seen, status="completed", blob=b"x" * 1000):
    conn.execute("INSERT INTO runs(run, status, preset, config, first_seen, last_seen, step, snapshot, "
                 "updated_at) VALUES (?,?,?,?,?,?,?,?,?)", (name, status, "default", "{}", last_seen,
                                                           last_seen, 1, blob, last_seen))
    conn.execute("INSERT INTO series(run, kind, lo, n, data) VALUES (?,?,?,?,?)", (name, "train", 0, 1, blob))


class TestPrune:
    KW = dict(retention_s=30 * 86400, max_runs=10, max_bytes=1024 ** 3, ended_after_s=600, idle_after_s=86400,
              max_pass_s=math.inf)

    def _db(self, tmp_path):
        conn, lock = open_db(str(tmp_path / "p.db"))
        self.lock = lock
        return conn

    def test_expired_runs_past_max_runs_go_oldest_first_and_live_ones_stay(self, tmp_path):
        conn, now = self._db(tmp_path), 1e6
        for i in range(30):
            _row(conn, f"old{i:02}", now - 10_000 + i)
        for i in range(5):
            _row(conn, f"live{i}", now - 10, status="running")
        res = retention.prune(conn, now, **self.KW)
        left = sorted(r for (r,) in conn.execute("SELECT run FROM runs"))
        assert res.count == 25 and res.runs == [f"old{i:02}" for i in range(25)]
        assert left == [f"live{i}" for i in range(5)] + [f"old{i}" for i in range(25, 30)]
        assert conn.execute("SELECT COUNT(*) FROM series").fetchone()[0] == 10

    def test_a_pass_deletes_at_most_max_per_pass_and_says_more_is_left(self, tmp_path):
        conn, now = self._db(tmp_path), 1e6
        for i in range(retention.MAX_PER_PASS + 60):
            _row(conn, f"r{i:04}", now - 10_000 + i)
        first = retention.prune(conn, now, **self.KW)
        second = retention.prune(conn, now, **self.KW)
        assert first.capped and len(first.runs) == retention.MAX_PER_PASS and first.runs[0] == "r0000"
        assert not second.capped and len(second.runs) == 50
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 10

    def test_a_pass_past_its_time_stops_after_ten_and_says_more_is_left(self, tmp_path):
        conn, now = self._db(tmp_path), 1e6
        for i in range(40):
            _row(conn, f"r{i:04}", now - 10_000 + i)
        res = retention.prune(conn, now, **dict(self.KW, max_pass_s=0.0))
        assert res.capped and res.runs == [f"r{i:04}" for i in range(10)] and res.count == 10
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 30

    def test_runs_past_retention_go_and_alerts_a_delivery_needs_stay(self, tmp_path):
        conn, now = self._db(tmp_path), 1e8
        _row(conn, "ancient", now - 31 * 86400)
        _row(conn, "recent", now - 86400)
        for key, state in (("k1", "delivered"), ("k2", "dead")):
            conn.execute("INSERT INTO alerts VALUES (?,?,?,?,?,?,?,?)", (key, "ancient", "spike", "firing",
                                                                          "warning", 1, "{}", now))
            conn.execute("INSERT INTO deliveries(key, sink, state, next_attempt_at, created_at, updated_at) "
                         "VALUES (?,?,?,?,?,?)", (key, "log", state, now, now, now))
        res = retention.prune(conn, now, **self.KW)
        assert res.runs == ["ancient"] and res.age == 1
        assert [k for (k,) in conn.execute("SELECT key FROM alerts")] == ["k2"]
        assert [k for (k,) in conn.execute("SELECT key FROM deliveries")] == ["k2"]

    def test_past_max_bytes_the_oldest_go_until_under_it(self, tmp_path):
        conn, now = self._db(tmp_path), 1e6
        for i in range(40):
            _row(conn, f"r{i:02}", now - 10_000 + i, blob=bytes(100_000))
        used = retention.used_bytes(conn)
        kw = dict(self.KW, max_runs=1000, max_bytes=used // 2)
        res = retention.prune(conn, now, **kw)
        assert res.size >= 15 and res.runs[0] == "r00" and res.used_bytes <= used // 2
        assert retention.prune(conn, now, **kw).runs == []          # under the cap: nothing more

    def test_an_ended_run_that_left_memory_goes_at_once_and_one_in_memory_stays(self, tmp_path):
        """Issue 38: ended runs just now (within the TTL) are candidates once they are out
        of memory, so the store holds max_runs plus the runs in memory; a run in memory
        within its TTL stays (its next snapshot would write its row again)."""
        conn, now = self._db(tmp_path), 1e6
        for i in range(40):
            _row(conn, f"gone{i:02}", now - 5 + i * 0.01)
        for i in range(20):
            _row(conn, f"mem{i:02}", now - 5 + i * 0.01)
        live = frozenset(f"mem{i:02}" for i in range(20))
        res = retention.prune(conn, now, **self.KW, live=live)
        left = {r for (r,) in conn.execute("SELECT run FROM runs")}
        assert res.count == 40 and left == live   # 20 in memory, over max_runs 10: only they stay
        assert retention.prune(conn, now, **self.KW).count == 10   # once out of memory: down to max_runs

    def test_the_budget_is_configured_and_checked(self):
        assert StateConfig().retention_days == 30 and StateConfig().max_runs == 10_000
        with pytest.raises(ConfigError, match="retention_days"):
            StateConfig(retention_days=0)
        with pytest.raises(ConfigError, match="max_bytes"):
            StateConfig(max_bytes=10)


def _api(d, path, missing_ok: bool = False):
    status, body = http_get(d.url + path, timeout=10)
    if missing_ok and status == 404:
        return {}
    assert status == 200, body
    return json.loads(body)


def _within(live: dict, stored: dict, field: str) -> None:
    """Every live point lies between the stored minimum and maximum over its steps (the
    live page's past points are means or last values of the steps since the one before)."""
    st = np.array([math.nan if v is None else v for v in stored["step"]])
    sv = np.array([math.nan if v is None else v for v in stored[field]])
    gap = np.max(np.diff(st))
    prev = -math.inf
    checked = 0
    for s, v in zip(live["step"], live[field]):
        if v is not None:
            win = sv[(st >= min(prev, s) - gap) & (st <= s + gap)]
            win = win[np.isfinite(win)]
            lo, hi = win.min(), win.max()     # float32 on disk
            assert lo - 1e-6 * abs(lo) - 1e-12 <= v <= hi + 1e-6 * abs(hi) + 1e-12, (field, s, v)
            checked += 1
        prev = s
    assert checked > 0, field


class TestDaemon:
    def test_a_stored_page_shows_what_the_live_page_showed_with_its_peaks(self, tmp_path):
        """Live page, then the run ends and leaves memory: its stored page has every chart,
        at least 2,000 points, the LR x100 step and the loss spike at full height."""
        n = 6000
        env = {"WTWIND_RUNS__ENDED_TTL_S": "1", "WTWIND_RUNS__ENDED_SERIES_S": "0"}
        with Daemon(tmpdir=str(tmp_path), extra_env=env) as d:
            e = connect(d.tcp, run="peaks")
            for t in range(1, n + 1):
                lr = 3e-4 * (100 if t == 2500 else 1)
                e.loss(t, 2.0 + 8.0 * (t + 50) ** -0.45 + (4.0 if t == 1234 else 0.0), lr=lr,
                       grad_norm=1.0 + (20.0 if t == 3333 else 0.0), tokens=t * 1024)
                if t % 500 == 0:
                    e.eval(t, val_loss=2.1 + 8.0 * (t + 50) ** -0.45)
            wait_for(lambda: _api(d, "/api/runs/peaks", True).get("step") == n, 60, 0.1, "every event")
            wait_for(lambda: len(_api(d, "/api/runs/peaks")["eval"]["step"]) == n // 500, 30, 0.1, "evals")
            live = _api(d, "/api/runs/peaks")
            e.close("completed")
            wait_for(lambda: _api(d, "/api/runs/peaks")["stored"], 60, 0.1, "the run to leave memory")
            stored = _api(d, "/api/runs/peaks")
        s = stored["series"]
        assert stored["status"] == "completed" and len(s["step"]) >= 2000 and s["step"][-1] == n
        assert max(s["lr"]) == pytest.approx(3e-2, rel=1e-6) and max(s["grad_norm"]) == pytest.approx(21.0)
        assert max(s["loss"]) == pytest.approx(2.0 + 8.0 * 1284 ** -0.45 + 4.0, rel=1e-6)   # step 1234
        for f in ("loss", "lr", "grad_norm", "tokens", "l_pred", "band_lo", "band_hi", "W"):
            if any(v is not None for v in live["series"][f]):
                _within(live["series"], s, f)
        assert stored["eval"]["step"] == live["eval"]["step"]
        assert stored["eval"]["val_loss"] == pytest.approx(live["eval"]["val_loss"], rel=1e-6)
        assert {(m["step"], m["kind"], m["status"]) for m in live["markers"]} <= \
            {(m["step"], m["kind"], m["status"]) for m in stored["markers"]}

    def test_a_client_that_churns_runs_cannot_grow_the_store_past_max_runs(self, tmp_path):
        """Runs that ended and left memory are pruned past [state] max_runs, oldest first,
        counted in /metrics and logged."""
        env = {"WTWIND_RUNS__ENDED_TTL_S": "0.2", "WTWIND_RUNS__ENDED_SERIES_S": "0",
               "WTWIND_STATE__MAX_RUNS": "5", "WTWIND_STATE__PRUNE_INTERVAL_S": "1"}
        with Daemon(tmpdir=str(tmp_path), extra_env=env) as d:
            for i in range(12):
                e = connect(d.tcp, run=f"churn{i:02}")
                e.loss(1, 1.0)
                e.close("completed")
            wait_for(lambda: d.metrics().get(("wtwind_store_pruned_runs_total", (("reason", "max_runs"),)), 0) >= 7,
                     60, 0.2, "7 runs pruned past max_runs")
            names = {r["run"] for r in _api(d, "/api/runs")["runs"]}
            log = d.log()
        assert names == {f"churn{i:02}" for i in range(7, 12)}
        assert '"store_pruned"' in log
        conn = sqlite3.connect(str(tmp_path / "wtwind.db"))
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 5


class TestPruneUnderChurn:
    def test_the_store_holds_max_runs_plus_those_in_memory(self, tmp_path):
        """Issue 38: 600 runs started and ended against ``[state] max_runs`` 100 (they
        leave memory after 1 s): the store is back to max_runs plus the runs in memory
        within seconds, not ``ended_series_s`` (900 s) after their end (a79b833: all
        still stored)."""
        from helpers import raw_dealer, sample
        from wtwin.emitters import wire

        env = {"WTWIND_RUNS__ENDED_TTL_S": "1", "WTWIND_STATE__MAX_RUNS": "100",
               "WTWIND_RUNS__MAX_RUNS_PER_CLIENT": "1000"}
        with Daemon(extra_env=env, tmpdir=str(tmp_path)) as d:
            db = tmp_path / "wtwind.db"

            def stored() -> int:
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                try:
                    return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
                finally:
                    conn.close()

            sock = raw_dealer(d.tcp)
            for start in range(0, 600, 50):
                sock.send(wire.encode_batch([
                    ev for i in range(start, start + 50) for ev in (
                        {"v": 1, "type": "run_start", "run": f"churn-{i}", "seq": 1},
                        {"v": 1, "type": "loss", "run": f"churn-{i}", "seq": 2, "step": 1, "loss": 2.0},
                        {"v": 1, "type": "run_end", "run": f"churn-{i}", "seq": 3, "status": "completed"})]))
            wait_for(lambda: sample(d, "wtwind_events_received_total", type="run_end") == 600, 60, 0.1,
                     "every run ended")
            wait_for(lambda: sample(d, "wtwind_known_runs") == 0, 60, 0.1, "the runs left memory")
            wait_for(lambda: stored() <= 100, 30, 0.1, "the store down to max_runs")
            sock.close()
