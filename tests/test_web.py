"""The run pages end to end: a real wtwind fed by real emitters (`web_fed.fed`) and its JSON
API; the pages themselves in a browser: test_web_browser.py."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from helpers import Daemon, http_get, need_shared_data, wait_for
from web_fed import NAN_LOG, ODD_NAME, SECRET_DIR, api, curve, fed, multipart, post, quoted  # noqa: F401
from wtwin.emitters import connect

class TestApi:
    def test_run_list_has_every_run_with_status_step_loss_and_alerts(self, fed):
        """/api/runs: one entry per run, alerts counted by severity, most severe first."""
        status, body = api(fed, "/api/runs")
        assert status == 200
        runs = {r["run"]: r for r in body["runs"]}
        assert set(runs) == {"healthy", "diverging", ODD_NAME, "finished", "hf-few", "spiky"}
        assert body["runs"][0]["run"] == "diverging" and body["stored"] is True
        assert runs["diverging"]["alerts"]["critical"] >= 1
        assert "nonfinite" in {a["kind"] for a in runs["diverging"]["firing"]}
        assert runs["healthy"]["loss"] == pytest.approx(curve(3000))
        assert runs["finished"]["status"] == "completed" and runs["finished"]["live"] is False
        assert runs["healthy"]["status"] == "running" and runs["healthy"]["live"] is True
        assert body["runs"][-1]["run"] == "finished"          # the stored history comes last
        assert abs(runs["healthy"]["last_seen"] - body["now"]) < 120

    def test_run_detail_has_series_forecast_eval_lr_and_markers(self, fed):
        """/api/runs/<id>: aligned series with a forecast, eval points, LR and alert markers."""
        status, p = api(fed, "/api/runs/healthy")
        assert status == 200
        s = p["series"]
        assert set(s) == {"step", "loss", "l_pred", "band_lo", "band_hi", "W", "lr", "grad_norm", "tokens", "time"}
        assert len({len(v) for v in s.values()}) == 1 and s["step"][-1] == 3000
        assert any(v is not None for v in s["l_pred"]) and s["lr"][-1] == pytest.approx(3e-5 * 1.0, rel=0.01)
        assert p["eval"]["step"] == [float(t) for t in range(250, 3001, 250)]
        assert p["last_eval"]["val_loss"] == pytest.approx(curve(3000) + 0.04)
        _, div = api(fed, "/api/runs/diverging")
        nonfinite = [m for m in div["markers"] if m["kind"] == "nonfinite"]
        assert nonfinite[0]["step"] == 2400 and nonfinite[0]["severity"] == "critical"
        assert div["series"]["loss"][-1] is None            # NaN travels as null

    def test_history_outlives_the_ttl_with_its_sparkline_and_alerts(self, fed):
        """A run that left memory (ended_ttl_s = 2 s) is listed and has a page, from the store."""
        _, body = api(fed, "/api/runs")
        runs = {r["run"]: r for r in body["runs"]}
        fin = runs["finished"]
        assert fin["step"] == 100 and fin["loss"] == pytest.approx(curve(100))
        assert 2 <= len(fin["spark"]) <= 48 and fin["spark"][0] > fin["spark"][-1]   # the loss fell
        assert 32 <= len(runs["healthy"]["spark"]) <= 48 and runs["diverging"]["spark"][-1] is None
        assert runs["diverging"]["fired"].get("critical", 0) >= 1
        status, p = api(fed, "/api/runs/finished")
        assert status == 200 and p["stored"] is True and p["status"] == "completed"
        assert p["series"]["step"][-1] == 100 and len(p["series"]["loss"]) == len(p["series"]["step"])
        assert set(p["series"]) >= {"step", "loss", "lr", "grad_norm", "tokens"}

    @pytest.mark.parametrize("query, names", [
        ("status=completed", {"finished"}),
        ("status=running", {"healthy", "diverging", ODD_NAME, "hf-few", "spiky"}),
        ("q=HEAL", {"healthy"}),
        ("q=" + quoted("(β)"), {ODD_NAME}),
        ("status=completed&q=heal", set()),
        ("q=" + quoted("%"), set()),              # LIKE wildcards are literal
    ])
    def test_filter_by_status_and_search_by_name(self, fed, query, names):
        """?status= and ?q= filter live runs and the stored history alike."""
        status, body = api(fed, "/api/runs?" + query)
        assert status == 200 and {r["run"] for r in body["runs"]} == names

    def test_bad_filters_are_readable_400s(self, fed):
        assert api(fed, "/api/runs?status=exploded")[0] == 400
        assert api(fed, "/api/runs?limit=many")[0] == 400
        body = api(fed, "/api/runs?limit=2")[1]
        assert len(body["runs"]) == 2 and body["total"] >= 6     # total counts past the limit

    def test_nan_loss_reads_nan_and_lr_grad_norm_tokens_are_plotted(self, fed):
        """A NaN run's last loss says "NaN"; a run's lr, grad norm and tokens are series."""
        _, div = api(fed, "/api/runs/diverging")
        assert div["loss"] is None and div["loss_nonfinite"] == "NaN"
        _, sp = api(fed, "/api/runs/spiky")
        s = sp["series"]
        assert s["grad_norm"][-1] == pytest.approx(0.8 + 4.0 * 3010 ** -0.5)
        assert s["tokens"][-1] == 3000 * 262144 and s["lr"][-1] == pytest.approx(3e-5)
        assert sp["config"]["schedule"] == "cosine"
        info = [m for m in sp["markers"] if m["kind"] == "spike" and m["severity"] == "info"]
        assert len([m for m in info if m["status"] == "firing"]) >= 3   # benign: collapsed on the page

    def test_a_rewind_event_shows_on_the_run(self, fed):
        """A trainer's Rewind audit: listed with the checkpoint's name only; its resume is info."""
        em = connect(fed.tcp, run="rewound")
        for t in range(1, 301):
            em.loss(t, curve(t))
        em.rewind(200, 300, kind="divergence", checkpoint=SECRET_DIR + "/step-200.pt", lr_scale=0.5, count=1)
        for t in range(201, 251):
            em.loss(t, curve(t) + 0.5)
        wait_for(lambda: api(fed, "/api/runs/rewound")[1].get("rewinds"), 20, 0.1, "the rewind")
        p = api(fed, "/api/runs/rewound")[1]
        em.close(timeout=1)
        rw = p["rewinds"][0]
        assert (rw["step"], rw["from_step"], rw["kind"], rw["lr_scale"]) == (200, 300, "divergence", 0.5)
        assert rw["checkpoint"] == "step-200.pt" and SECRET_DIR not in json.dumps(p)
        wait_for(lambda: api(fed, "/api/runs/rewound")[1]["step"] == 250, 20, 0.1, "the resumed steps")
        jumps = [m for m in api(fed, "/api/runs/rewound")[1]["markers"] if m["kind"] == "resume_jump"]
        assert jumps and all(m["severity"] == "info" for m in jumps)

    def test_a_run_with_few_points_says_when_its_forecast_comes(self, fed):
        """23 points every 10 steps: no forecast, and the page is told why and until when."""
        _, p = api(fed, "/api/runs/hf-few")
        assert all(v is None for v in p["series"]["l_pred"])
        w = p["forecast_wait"]
        assert (w["points"], w["every"], w["warmup"], w["first_step"], w["points_to_go"]) == (23, 10, 300, 310, 8)
        assert api(fed, "/api/runs/healthy")[1]["forecast_wait"] is None

    def test_odd_run_names_round_trip(self, fed):
        """A name with a slash, spaces and non-ASCII works in the API path."""
        status, p = api(fed, "/api/runs/" + quoted(ODD_NAME))
        assert status == 200 and p["run"] == ODD_NAME and p["step"] == 50

    def test_unknown_run_is_a_json_404(self, fed):
        """A run that is not (or no longer) known gets a 404 with a sentence."""
        status, p = api(fed, "/api/runs/nope")
        assert status == 404 and "nope" in p["error"]

    def test_no_paths_or_secrets_reach_the_page(self, fed):
        """Config values that are paths or secrets are dropped; checkpoints show by name only."""
        if fed.checkpoint:
            wait_for(lambda: api(fed, "/api/runs/healthy")[1]["spectral"], 90, 0.2, "spectral result")
        status, body = http_get(fed.url + "/api/runs/healthy")
        p = json.loads(body)
        assert p["config"] == {"lr": 3e-4, "model": "gpt2-124M"}
        for leak in (SECRET_DIR, "hunter2", str(Path(fed.tmp))):
            assert leak not in body
        if fed.checkpoint:
            sp = p["spectral"]
            assert sp["checkpoint"] == "step_3000.pt" and sp["step"] == 3000
            assert {lr["name"] for lr in sp["layers"]} == {"h.0", "h.1"}
            assert all(lr["alpha"] > 1 for lr in sp["layers"])

    def test_pages_and_static_files_are_served_with_a_strict_policy(self, fed):
        """The three pages and the vendored uPlot load from the daemon itself, nothing else."""
        for path in ("/", "/runs/healthy", "/runs/" + quoted(ODD_NAME), "/analyze"):
            with urllib.request.urlopen(fed.url + path) as r:
                html = r.read().decode()
                assert r.headers["Content-Security-Policy"].startswith("default-src 'self'")
                assert "http://" not in html and "https://" not in html
        with urllib.request.urlopen(fed.url + "/static/uPlot.iife.min.js") as r:
            assert r.headers["X-Content-Type-Options"] == "nosniff" and b"uPlot" in r.read()
        with urllib.request.urlopen(fed.url + "/metrics") as r:
            assert "Content-Security-Policy" not in r.headers   # other routes are left alone

    def test_analyze_a_real_nan_log(self, fed):
        """A real all-NaN llm.c log dropped as multipart: nonfinite, critical."""
        data = need_shared_data() / "real-logs" / NAN_LOG
        body, ctype = multipart(NAN_LOG, data.read_bytes())
        status, p = post(fed.url + "/api/analyze", body, ctype)
        assert status == 200, p
        assert p["file"] == NAN_LOG and p["points"] == 903 and p["alerts"]["critical"] >= 1
        assert any(t["kind"] == "nonfinite" for t in p["transitions"])
        assert len(p["series"]["step"]) > 0 and all(v is None for v in p["series"]["loss"])

    def test_analyze_jsonl_raw_body_with_preset(self, fed):
        """A JSONL log posted as a raw body, with the preset and name in the query."""
        lines = [json.dumps({"iter": t, "train_loss": curve(t), "lr": 1e-4}) for t in range(1, 500)]
        status, p = post(fed.url + "/api/analyze?name=run.jsonl&preset=finetuning",
                         "\n".join(lines).encode(), "application/x-ndjson")
        assert status == 200, p
        assert p["preset"] == "finetuning" and p["columns"]["step"] == "iter" and p["n_loss"] == 499

    def test_analyze_judges_a_smoothed_log_as_wtwin_monitor_does(self, fed):
        """A healthy run logged as a mean of the last 20 batches (it pages judged on every
        point, tests/test_smoothed.py): the page judges one point in 16, says why, and
        pages nothing, as ``wtwin monitor`` does."""
        from test_smoothed import healthy, window
        y = window(healthy(1))
        csv = "step,loss\n" + "".join(f"{i},{v:.4f}\n" for i, v in enumerate(y.tolist(), 1))
        status, p = post(fed.url + "/api/analyze?name=smoothed.csv", csv.encode(), "text/csv")
        assert status == 200, p
        assert p["smoothed"]["every"] == 16 and p["points"] == len(y)
        assert "looks smoothed" in p["smoothed"]["note"]
        assert p["alerts"]["warning"] == 0 and p["alerts"]["critical"] == 0, p["transitions"]

    def test_analyze_reads_an_epoch_in_fractions_as_whole_steps(self, fed):
        """A log indexed by a fractional epoch: the steps are epoch x 100 and the page says
        so (tests/test_step_columns.py)."""
        from test_step_columns import rows
        csv = "epoch,loss\n" + "".join(f"{e},{v:.4f}\n" for e, v in rows(1000))
        status, p = post(fed.url + "/api/analyze?name=epochs.csv", csv.encode(), "text/csv")
        assert status == 200, p
        assert p["step_scale"]["times"] == 100 and p["step"] == 1000
        assert "the epoch column counts epochs, read at epoch x 100" in p["step_scale"]["note"]

    @pytest.mark.parametrize("content, says", [(b"\x00\x01\x02", "binary"), (b"", "empty"),
                                               (b"a,b\n1,2\n", "no loss column")])
    def test_analyze_bad_files_say_why(self, fed, content, says):
        """A bad file is a 400 with one sentence that names the file as uploaded."""
        body, ctype = multipart("../x/my.csv", content)
        status, p = post(fed.url + "/api/analyze", body, ctype)
        assert status == 400 and says in p["error"] and p["error"].startswith("my.csv: ")
        assert p["error"].count("my.csv") == 1   # named once (the page shows it as it is)
        assert "/tmp" not in p["error"] and "wtwind-analyze" not in p["error"]

    def test_analyze_upload_limits_name_the_file_once(self, fed):
        """Too many rows: the sentence starts with the file's name, once."""
        body, ctype = multipart("big.csv", b"step,loss\n" + b"1,2\n" * 200_001)
        status, p = post(fed.url + "/api/analyze", body, ctype)
        assert status == 400 and p["error"].startswith("big.csv: ") and p["error"].count("big.csv") == 1

    def test_analyze_picks_the_preset_by_the_clis_rule(self, fed, tmp_path):
        """No preset: a fine-tune's trainer_state.json gets the preset `wtwin monitor` gives it."""
        from wtwin.offline.logs import read_log
        from wtwin.offline.checks import choose_preset

        history = [{"step": t, "loss": 1.2 * 0.999 ** t + 0.5, "learning_rate": 2e-5} for t in range(1, 400)]
        state = json.dumps({"global_step": 399, "max_steps": 399, "log_history": history}).encode()
        (tmp_path / "trainer_state.json").write_bytes(state)
        cli_preset = choose_preset(read_log(tmp_path / "trainer_state.json"), None)
        body, ctype = multipart("trainer_state.json", state)
        status, p = post(fed.url + "/api/analyze", body, ctype)
        assert status == 200, p
        assert cli_preset == ("finetuning", "trainer_state.json")
        assert (p["preset"], p["preset_from"]) == cli_preset

    def test_analyze_unknown_preset_and_missing_file(self, fed):
        """An unknown preset and a form without a file are both readable 400s."""
        body, ctype = multipart("a.csv", b"step,loss\n1,2\n", preset="nope")
        assert post(fed.url + "/api/analyze", body, ctype)[0] == 400
        b = uuid.uuid4().hex
        empty = f'--{b}\r\nContent-Disposition: form-data; name="preset"\r\n\r\n\r\n--{b}--\r\n'.encode()
        status, p = post(fed.url + "/api/analyze", empty, f"multipart/form-data; boundary={b}")
        assert status == 400 and "no file" in p["error"]

    def test_analyze_refuses_posts_from_other_sites(self, fed):
        """A page of another origin cannot make the daemon analyse files; its own page can."""
        body, ctype = multipart("a.csv", b"step,loss\n1,2\n2,1.9\n")
        assert post(fed.url + "/api/analyze", body, ctype, Origin="https://evil.example")[0] == 403
        assert post(fed.url + "/api/analyze", body, ctype, Origin=fed.url)[0] == 200

    def test_series_stay_bounded_on_a_long_run(self, fed):
        """20k steps come back as the recent window plus a log-spaced past, not 20k points."""
        em = connect(fed.tcp, run="long")
        for t in range(1, 20_001):
            em.loss(t, curve(t))
            if t % 2000 == 0:
                assert em.flush(30)     # stay under the emitter's bounded queue
        wait_for(lambda: api(fed, "/api/runs/long")[1].get("step") == 20_000, 60, 0.1, "long run")
        steps = api(fed, "/api/runs/long")[1]["series"]["step"]
        em.close(timeout=1)
        assert len(steps) <= 1024 + 64 + 512
        assert steps[-1024:] == [float(t) for t in range(18_977, 20_001)]
        assert steps[0] <= 2 and all(a < b for a, b in zip(steps, steps[1:]))


class TestRestart:
    def test_a_run_page_keeps_its_early_curve_across_a_daemon_restart(self, tmp_path):
        """The plot series lives in memory; the stored sparkline brings back the steps before
        the restart, so the chart does not start at the restart's step."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            em = connect(d.tcp, run="restarted")
            for t in range(1, 501):
                em.loss(t, curve(t))
            assert em.flush(20)
            wait_for(lambda: api(d, "/api/runs/restarted")[1].get("step") == 500, 20, 0.1, "500 steps")
            em.close(timeout=1)
        with Daemon(tmpdir=str(tmp_path)) as d:
            em = connect(d.tcp, run="restarted", resume=True)   # else a new run of the name
            for t in range(501, 601):
                em.loss(t, curve(t))
            wait_for(lambda: api(d, "/api/runs/restarted")[1].get("step") == 600, 20, 0.1, "600 steps")
            p = api(d, "/api/runs/restarted")[1]
            em.close(timeout=1)
        steps = p["series"]["step"]
        early = [s for s in steps if s < 501]
        # the stored history (issue 37 item 7: the store's buckets, not the 64-point sparkline)
        assert p["stored"] is False and p["from_store"] and 5 <= len(early) <= 500 and early[-1] <= 500
        assert steps[len(early):] == [float(t) for t in range(501, 601)]
        assert all(a < b for a, b in zip(steps, steps[1:]))
        assert len({len(v) for v in p["series"].values()}) == 1


# ---- real browser ---------------------------------------------------------------------
