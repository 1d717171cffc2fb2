"""The run page's data: the bounded decimated series and the browser-safe views."""

import json
import math
import time

import pytest

from wtwin.daemon.series import TRAIN_FIELDS, Decimated, RunSeries, Spark
from wtwin.daemon.spectral.health import SpectralWatch
from wtwin.daemon.spectral.result import LayerResult
from wtwin.daemon.web.analyze import AnalyzeError, analyze_file, display_name
from wtwin.daemon.web.views import (matches, safe_config, scrub, spectral_view, stored_summary,
                                    with_earlier)
from wtwin.detect.alert import Alert


def feed(s, n, start=0):
    for t in range(start, start + n):
        s.append(t, 3.0 + 1.0 / (t + 1), 3.0, 2.9, 3.1, 0.5, 1e-3)


class TestDecimated:
    def test_memory_is_bounded_at_any_run_length(self):
        """300k points keep the same fixed blocks and at most recent+64+past rows, plus
        fewer than 64 staged points waiting to enter the ring."""
        s = Decimated(TRAIN_FIELDS, recent=256, past=128)
        feed(s, 20_000)
        blocks = (s._ring.nbytes, s._last.nbytes)
        feed(s, 280_000, start=20_000)
        assert (s._ring.nbytes, s._last.nbytes) == blocks
        assert len(s) <= 256 + 64 + 128 + 63
        assert len(s.columns()["step"]) == len(s)

    def test_recent_window_is_full_resolution_and_past_is_log_spaced(self):
        """The newest points are all there; older ones thin out with the step's log."""
        s = Decimated(("step", "loss"), recent=100, past=400, per_decade=20)
        for t in range(100_000):
            s.append(t, 1.0)
        steps = s.columns()["step"]
        assert steps[-100:] == [float(t) for t in range(99_900, 100_000)]
        past = steps[:-164]
        assert past[:8] == [float(t) for t in range(8)]        # early steps each their own bin
        gaps = [b - a for a, b in zip(past, past[1:])]
        assert gaps[-1] > 100 * gaps[20]                         # later bins much wider
        assert all(g > 0 for g in gaps)

    def test_past_bins_average_the_loss_and_keep_the_last_forecast(self):
        """A folded bin plots the mean of its finite losses and the last value of the others."""
        s = Decimated(("step", "loss", "l_pred"), recent=1, past=16, per_decade=1)
        for t, loss in [(10, 1.0), (11, 3.0), (12, float("nan")), (13, 5.0)]:
            s.append(t, loss, float(t))
        for t in range(1000, 1066):     # 64 oldest points fold: every step 10..99 is one bin
            s.append(t, 0.0, 0.0)
        rows = s.rows()
        assert rows[0, 1] == pytest.approx(3.0) and rows[0, 2] == 13.0

    def test_step_going_back_truncates_so_steps_stay_ordered(self):
        """A resume from an earlier step replaces the tail instead of folding time back."""
        s = Decimated(("step", "loss"), recent=50, past=64)
        feed2 = lambda a, b: [s.append(t, float(t)) for t in range(a, b)]
        feed2(0, 5000)
        feed2(3000, 3100)
        steps = s.columns()["step"]
        assert steps[-1] == 3099.0 and all(a < b for a, b in zip(steps, steps[1:]))

    def test_columns_are_json_safe(self):
        """NaN, inf and missing values come out as None; json.dumps(allow_nan=False) works."""
        s = Decimated(("step", "loss", "lr"), recent=8, past=8)
        s.append(1, float("nan"))
        s.append(2, float("inf"), 0.1)
        cols = s.columns()
        assert cols == {"step": [1.0, 2.0], "loss": [None, None], "lr": [None, 0.1]}
        json.dumps(cols, allow_nan=False)

    def test_bad_sizes_are_rejected(self):
        """Construction checks its bounds."""
        with pytest.raises(ValueError):
            Decimated(("step",), recent=0)

    def test_append_is_cheap(self):
        """Appending stays in the microseconds (it is on the daemon's hot path). CPU time
        of this thread, not wall time: the neighbours' load does not count."""
        s = Decimated(TRAIN_FIELDS)
        t0 = time.thread_time()
        feed(s, 50_000)
        per = (time.thread_time() - t0) / 50_000
        assert per < 50e-6, f"{per * 1e6:.1f} us per append"


    def test_what_it_shows_does_not_depend_on_when_staged_points_move_into_the_ring(self):
        """Points wait in a stage of 64 and move into the ring (folding the oldest) in one
        block; the rows shown at any moment are those of a series that moves every point
        at once, resumes (steps going back) included."""
        import random

        rng = random.Random(25)
        lazy = Decimated(("step", "loss"), recent=200, past=16, per_decade=8)
        eager = Decimated(("step", "loss"), recent=200, past=16, per_decade=8)
        step = 0
        for i in range(20_000):
            step = step - rng.randrange(1, 300) if rng.random() < 0.001 and step > 400 else step + 1
            for s in (lazy, eager):
                s.append(step, 1.0 / (1 + step) + (math.nan if i % 997 == 0 else 0.0))
            eager._flush()
            if rng.random() < 0.003:
                assert lazy.rows().tobytes() == eager.rows().tobytes(), i
        assert lazy.rows().tobytes() == eager.rows().tobytes()
        assert lazy._shift > 0  # the past was merged pairwise on the way


class TestRunSeries:
    def test_markers_are_bounded_and_carry_the_alert(self):
        """Alert transitions become markers; only the newest `markers` are kept."""
        rs = RunSeries(markers=3)
        for step in range(5):
            rs.mark(Alert(run="r", kind="spike", severity="info", status="firing", step=step,
                          started_at=0.0, message=f"m{step}"))
        assert [m["step"] for m in rs.markers] == [2, 3, 4]
        assert rs.markers[-1] == {"step": 4, "kind": "spike", "severity": "info",
                                  "status": "firing", "message": "m4", "details": ""}

    def test_eval_takes_val_loss_and_ignores_non_numbers(self):
        """Eval metrics feed the eval series by val_loss (or loss)."""
        rs = RunSeries()
        rs.add_eval(10, {"val_loss": 2.5})
        rs.add_eval(20, {"loss": 2.4})
        rs.add_eval(30, {"acc": 0.9, "val_loss": "x"})
        assert rs.eval.columns() == {"step": [10.0, 20.0], "val_loss": [2.5, 2.4]}


class TestViews:
    def test_scrub_keeps_only_file_names(self):
        """Absolute and nested relative paths lose their directories; ratios survive."""
        assert scrub("ckpt /data/team/run7/step_100.pt failed") == "ckpt step_100.pt failed"
        assert scrub("in runs/a/b.safetensors") == "in b.safetensors"
        assert scrub("grad ratio 3/4") == "grad ratio 3/4"
        book = "https://github.com/wtwin/wtwin/blob/main/docs/runbooks/WTwinLossSpike.md"
        assert scrub(f"at /data/x/y.pt; first check the batch: {book}.") == f"at y.pt; first check the batch: {book}."

    def test_safe_config_drops_paths_urls_and_secrets(self):
        """Numbers and short words stay; secret-ish keys and path-ish values go."""
        cfg = {"lr": 3e-4, "model": "gpt2-124M", "batch": 512, "amp": True, "api_key": "abc",
               "data_dir": "/mnt/data", "note": "see /home/me", "hf_token": "hf_x",
               "out": "s3://bucket/x", "slack_url": "https://hooks"}
        assert safe_config(cfg) == {"lr": 3e-4, "model": "gpt2-124M", "batch": 512, "amp": True}

    def test_spectral_view_from_watch_and_job_result(self):
        """A SpectralWatch and a JobResult-like dict both give per-layer alpha, file name only."""
        def lr(name, alpha):
            return LayerResult(name=name, kind="dense", n=10, m=10, rf=1, num_evals=10, status="ok",
                               alpha=alpha, alpha_weighted=0, xmin=1, num_pl_spikes=3, D=0.1,
                               sigma=0.1, lambda_max=1, stable_rank=1, log_norm=0,
                               log_spectral_norm=0, detX_num=3, erg_gap=0)
        w = SpectralWatch()
        w.update(100, [lr("h.0", 3.0), lr("h.1", 7.0)])
        v = spectral_view(w)
        assert v["step"] == 100 and v["mean_alpha"] == 5.0
        assert [(x["name"], x["outside"]) for x in v["layers"]] == [("h.0", False), ("h.1", True)]
        v = spectral_view({"step": 5, "path": "/secret/dir/ck.pt", "layers": [lr("a", 2.5)]})
        assert v["checkpoint"] == "ck.pt" and "secret" not in json.dumps(v)
        assert spectral_view(None) is None


class TestAnalyzeFile:
    def test_trainer_state_json_is_replayed(self, tmp_path):
        """A Hugging Face trainer_state.json gives a series, eval points and no path."""
        hist = [{"step": s, "loss": 2.0 + 5.0 / s, "learning_rate": 1e-4} for s in range(1, 400)]
        hist += [{"step": s, "eval_loss": 2.1 + 5.0 / s} for s in range(50, 400, 50)]
        hist.append({"step": 400, "loss": float("nan")})
        p = tmp_path / "trainer_state.json"
        p.write_text(json.dumps({"global_step": 400, "log_history": hist}))
        out = analyze_file(str(p), "trainer_state.json", "finetuning")
        assert out["points"] == len(hist) and out["columns"]["lr"] == "learning_rate"
        assert len(out["eval"]["step"]) == 7
        assert any(t["kind"] == "nonfinite" and t["severity"] == "critical" for t in out["transitions"])
        assert str(tmp_path) not in json.dumps(out)

    @pytest.mark.parametrize("content, says", [
        (b"", "empty"),
        (b"\x00\x01\x02binary", "binary"),
        (b"step,accuracy\n1,0.5\n2,0.6\n", "no loss column"),
        (b'{"step": 1, "loss": 2}\n{"step": 2, "loss":\n', "not valid JSON"),
        (b"step,loss\n1,abc\n", "not a number"),
    ])
    def test_bad_files_get_one_sentence_naming_the_file_as_uploaded(self, tmp_path, content, says):
        """The message names the user's file name, never the temporary path."""
        p = tmp_path / "upload"
        p.write_bytes(content)
        with pytest.raises(AnalyzeError) as e:
            analyze_file(str(p), "my log.csv", "pretraining")
        msg = str(e.value)
        assert says in msg and "my log.csv" in msg and str(tmp_path) not in msg

    def test_display_name_strips_directories_and_odd_characters(self):
        """Only a base name with plain characters is ever echoed back."""
        assert display_name("C:\\Users\\me\\run.csv") == "run.csv"
        assert display_name("../../etc/<script>.csv") == "_script_.csv"
        assert display_name(None) == "uploaded file"

    @pytest.mark.parametrize("name", [
        "mlperf10__bert_supermicro_as2124gq_result6_aborted_diverged.csv",
        "llmc__HectorFCardenas_gpt2_124M_job11672255_nan.csv",
        "mng__2024-11-24_WindowWarmup_cf9e4571.csv",
    ])
    def test_the_page_pages_where_the_offline_cli_does(self, name):
        """/analyze and `wtwin monitor` agree on the first warning/critical step of real logs."""
        from helpers import need_shared_data
        from wtwin.offline.logs import read_log
        from wtwin.offline.cli import monitor_log

        path = need_shared_data() / "real-logs" / name
        page = analyze_file(str(path), name, "pretraining")
        cli = monitor_log(read_log(str(path)), "pretraining")
        first = [t["step"] for t in page["transitions"]
                 if t["status"] == "firing" and t["severity"] in ("warning", "critical")]
        assert (min(first) if first else None) == cli["first_alert_step"]


class TestSpark:
    def test_a_million_steps_stay_under_64_points_ending_at_the_last_step(self):
        sp = Spark()
        for t in range(1, 1_000_001):
            sp.add(t, 10.0 / t ** 0.3)
        pts = sp.points()
        assert 32 <= len(pts) <= 64 and pts[-1][0] == 1_000_000
        assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(pts, pts[1:]))   # the loss falls

    def test_nan_stretches_are_nan_and_finite_neighbours_are_kept(self):
        sp = Spark(size=8)
        for t in range(1, 9):
            sp.add(t, float("nan") if t > 4 else 1.0)
        vals = [v for _, v in sp.points()]
        assert vals[0] == 1.0 and math.isnan(vals[-1])

    def test_a_resume_drops_what_followed_and_a_snapshot_round_trips(self):
        sp = Spark(size=8)
        for t in range(1, 41):
            sp.add(t, 1.0)
        sp.add(10, 2.0)
        assert sp.points()[-1] == (10, 2.0) and all(s <= 10 for s, _ in sp.points())
        again = Spark.restore(sp.snapshot())
        assert again.points() == sp.points() and again.stride == sp.stride

    def test_size_must_be_even(self):
        with pytest.raises(ValueError):
            Spark(size=7)


class TestStoredViews:
    STORED = {"run": "old", "status": "running", "preset": "pretraining", "step": 90,
              "first_seen": 1.0, "last_seen": 2.0, "loss": float("nan"), "lr": None,
              "spark": [[10, 3.0], [50, 2.5], [90, float("nan")]], "fired": {"critical": 1, "bogus": 3},
              "rewinds": []}

    def test_a_stored_running_run_is_idle_and_its_nan_reads_nan(self):
        """Not in memory but stored as running: it went silent past idle_ttl_s."""
        d = stored_summary(self.STORED)
        assert d["status"] == "idle" and d["live"] is False
        assert d["loss"] is None and d["loss_nonfinite"] == "NaN"
        assert d["spark"] == [3.0, 2.5, None] and d["fired"] == {"critical": 1}
        assert matches(d, {"idle"}, "OL") and not matches(d, {"running"}, "") and not matches(d, set(), "x")

    def test_earlier_sparkline_points_go_in_front_of_a_restarted_series(self):
        series = {"step": [100.0, 101.0], "loss": [2.0, 1.9], "lr": [None, None]}
        out = with_earlier(series, [(50, 2.5), (99, 2.1), (101, 1.9)])
        assert out["step"] == [50.0, 99.0, 100.0, 101.0] and out["loss"] == [2.5, 2.1, 2.0, 1.9]
        assert out["lr"] == [None] * 4 and with_earlier(series, [(150, 1.0)]) is series
