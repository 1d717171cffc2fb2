"""Any scalar the trainer logs (``emit.scalar``, daemon/scalars.py): charted live, kept in
the store across a restart (the page right after it equals the stored page), and bounded:
names past a run's cap dropped and counted, bad names rejected at the wire. A real
wtwind, real emitters, raw frames where a client misbehaves."""

from __future__ import annotations

import math

import msgpack
from helpers import Daemon, raw_dealer, run_at, run_page, sample, wait_for

from wtwin.daemon.scalars import PER_RUN
from wtwin.emitters import connect


class TestScalars:
    def test_scalars_are_charted_live_and_their_stored_page_equals_the_live_one(self, tmp_path):
        """Two names over 3,000 steps (one NaN) are on the live page, right after a
        restart (from the store) and from the store alone, the same points each time."""
        d = Daemon(tmpdir=str(tmp_path)).start()
        try:
            e = connect(d.ipc, run="sc")
            for t in range(1, 3001):
                e.loss(t, 3.0 - t / 3000)
                e.scalar(t, "train/grad_scale", 2.0 ** (t % 7))
                if t % 10 == 0:
                    e.scalar(t, "eval_accuracy", float("nan") if t == 1500 else t / 3000)
            e.close("completed")
            before = run_at(d, "sc", 3000, "completed")
        finally:
            d.stop()
        sc = before["scalars"]
        assert sorted(sc) == ["eval_accuracy", "train/grad_scale"]
        assert sc["eval_accuracy"]["step"][-1] == 3000 and sc["eval_accuracy"]["value"][-1] == 1.0
        assert len(sc["train/grad_scale"]["step"]) > 500
        assert None in sc["eval_accuracy"]["value"]          # the NaN, as the loss keeps one
        with Daemon(tmpdir=str(tmp_path)) as d2:           # back in memory, from the store
            live = run_at(d2, "sc", 3000, "completed")
            assert live.get("from_store") is True
        gone = {"WTWIND_RUNS__ENDED_TTL_S": "0", "WTWIND_RUNS__ENDED_SERIES_S": "0"}
        with Daemon(tmpdir=str(tmp_path), extra_env=gone) as d3:   # the store only
            stored = run_at(d3, "sc", 3000, "completed")
            assert stored["stored"] is True
        assert live["scalars"] == stored["scalars"]
        assert sorted(stored["scalars"]) == ["eval_accuracy", "train/grad_scale"]
        steps = stored["scalars"]["eval_accuracy"]["step"]
        assert steps[0] == 10 and steps[-1] == 3000 and len(steps) >= 280
        vals = [v for v in stored["scalars"]["train/grad_scale"]["value"] if v is not None]
        assert min(vals) == 1.0 and max(vals) == 64.0        # the buckets keep the peaks

    def test_names_past_the_cap_are_dropped_counted_and_logged_once(self, tmp_path):
        """A run that logs 40 names keeps the first 32; each value of the 8 others is
        counted; the log says so once; the run's loss goes on."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            e = connect(d.ipc, run="many")
            for t in range(1, 6):
                e.loss(t, 1.0)
                for i in range(PER_RUN + 8):
                    e.scalar(t, f"m{i:02d}", i + t)
            e.loss(6, 0.5)
            e.close("completed")
            p = run_at(d, "many", 6, "completed")
            assert sorted(p["scalars"]) == [f"m{i:02d}" for i in range(PER_RUN)]
            assert p["scalars"]["m31"]["value"] == [32.0, 33.0, 34.0, 35.0, 36.0]
            wait_for(lambda: sample(d, "wtwind_scalars_dropped_total", reason="names_per_run") == 40,
                     10, 0.05, "40 values dropped")
            assert d.log().count('"scalar_dropped"') == 1
            assert sample(d, "wtwind_budget_items", part="scalar_series", state="held") == PER_RUN

    def test_hostile_scalar_events_are_rejected_and_the_run_goes_on(self, tmp_path):
        """Bad names, a bool value, a missing value and a negative step are rejected by
        reason; a non-finite value is kept (None on the page); nothing crashes."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            sock = raw_dealer(d.tcp)
            base = {"v": 1, "type": "scalar", "run": "raw", "step": 1, "name": "ok", "value": 1.0}
            bad = [({"name": "x" * 65}, "bad_value"), ({"name": ""}, "bad_value"),
                   ({"name": "a b"}, "bad_value"), ({"name": "<script>"}, "bad_value"),
                   ({"name": 7}, "bad_type"), ({"value": True}, "bad_type"),
                   ({"value": None}, "missing_field"), ({"step": -1}, "bad_value")]
            events = [{**base, **over} for over, _ in bad]
            events += [{**base, "step": 2, "value": math.inf}, {**base, "step": 3, "value": 2.5},
                       {"v": 1, "type": "loss", "run": "raw", "step": 3, "loss": 1.0}]
            for i, ev in enumerate(events):
                ev["seq"] = i
            sock.send(msgpack.packb({"v": 1, "type": "batch", "events": events}))
            p = wait_for(lambda: (p := run_page(d, "raw")) and p["step"] == 3 and p, 10, 0.05, "raw at 3")
            assert p["scalars"] == {"ok": {"step": [2.0, 3.0], "value": [None, 2.5]}}
            for reason in ("bad_value", "bad_type", "missing_field"):
                want = sum(1 for _, r in bad if r == reason)
                assert sample(d, "wtwind_events_rejected_total", reason=reason) == want, reason
            assert sample(d, "wtwind_events_received_total", type="scalar") == 2
            sock.close()


class TestScalarBudget:
    def test_the_daemons_cap_holds_over_runs_and_frees_with_a_run(self):
        """Two runs share a budget of 3 series: the third name of the second run is over
        (``names_total``); the first run leaving memory frees its two."""
        import gc

        from wtwin.daemon.scalars import RunScalars, ScalarBudget

        budget = ScalarBudget(max_series=3, per_run=2)
        a, b = RunScalars("a", budget, keep=False), RunScalars("b", budget, keep=False)
        for name in ("x", "y", "z"):
            a.add(1, name, 1.0)
        assert sorted(a.series) == ["x", "y"] and budget.dropped == {"names_per_run": 1}
        b.add(1, "x", 1.0)
        b.add(1, "y", 1.0)
        assert list(b.series) == ["x"] and budget.dropped["names_total"] == 1 and budget.held == 3
        del a
        gc.collect()
        assert budget.held == 1
        b.add(2, "y", 2.0)
        assert sorted(b.series) == ["x", "y"] and budget.held == 2

    def test_names_from_the_store_count_against_the_cap(self):
        """A run restored with two stored names (their envelopes' state) has no room for a
        third under a cap of 2, and resumes their envelopes' widths."""
        from wtwin.daemon.scalars import RunScalars, ScalarBudget

        budget = ScalarBudget(per_run=2)
        r = RunScalars("r", budget, history={"p": {"w": 8.0, "first": 1.0}, "q": {"w": 1.0, "first": 5.0}})
        r.add(10, "new", 1.0)
        assert sorted(r.series) == ["p", "q"] and budget.dropped == {"names_per_run": 1}
        assert r.series["p"].history.width == 8.0 and r.series["p"].history.kind == "s:p"

    def test_a_runs_time_and_memory_series_takes_its_share_of_the_cap(self):
        """A run's series of time and memory counts ``TIMING_UNITS`` against the same cap
        (each is about 231 KB at worst: 10,000 runs sending timing would hold 2.3 GB):
        past it, the rows are dropped and counted (``timing_total``), the run's loss and
        its detectors go on; the run leaving memory frees its share."""
        import gc

        from wtwin.daemon.run_state import RunState
        from wtwin.daemon.scalars import TIMING_UNITS, ScalarBudget

        budget = ScalarBudget(max_series=TIMING_UNITS + 1)
        runs = [RunState(name, preset="pretraining", cooldown_s=0, now=0.0, keep_history=False,
                         scalar_budget=budget) for name in ("a", "b")]
        for step in range(1, 4):
            for r in runs:
                r.observe({"type": "loss", "step": step, "loss": 2.0, "step_time_s": 0.2,
                           "mem_reserved": 1e9}, float(step))
        a, b = runs
        assert a.series.timing is not None and b.series.timing is None
        assert budget.held == TIMING_UNITS and budget.dropped == {"timing_total": 3}
        assert b.step == 3 and b.timing == {"step_time_s": 0.2, "mem_reserved": 1e9}
        del a, runs
        gc.collect()
        assert budget.held == 0
        b.observe({"type": "loss", "step": 4, "loss": 2.0, "step_time_s": 0.2}, 4.0)
        assert b.series.timing is not None and budget.held == TIMING_UNITS
