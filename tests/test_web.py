"""The run pages end to end: a real wtwind fed by real emitters, its JSON API, and the pages
in headless Chromium (Debian's, driven by Playwright; never a downloaded browser)."""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from helpers import IN_CI, REPO, Daemon, http_get, need_binary, need_shared_data, wait_for
from wtwin.emitters import connect

# Screenshots go to a temporary folder; WTWIN_UPDATE_SCREENSHOTS=1 (`make screenshots`)
# writes the ones docs/HTTP.md shows, so a test run leaves the tree clean.
DOC_SHOTS = REPO / "docs" / "screenshots"
NAN_LOG = "llmc__HectorFCardenas_gpt2_124M_job11672255_nan.csv"
CLEAN_LOG = "mng__2024-10-09_SOAP_5bdc3988.csv"
ODD_NAME = "team/exp 1 (β)"
SECRET_DIR = "/srv/secret-team-dir"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def curve(t: int) -> float:
    return 2.0 + 8.0 * (t + 50) ** -0.45 + 0.02 * math.sin(t * 1.7)


def spiky(t: int) -> float:
    """A loss over more than a decade (7.2 -> 0.34), with benign one-step spikes."""
    base = 0.3 + 60.0 * (t + 10) ** -0.9 + 0.004 * math.sin(t * 1.3)
    return base * (1.6 if t in SPIKES else 1.0)


SPIKES = (900, 1500, 2100, 2600)


def api(d, path: str):
    status, body = http_get(d.url + path, timeout=5)
    return status, json.loads(body)


def quoted(run: str) -> str:
    return urllib.parse.quote(run, safe="")


def post(url: str, body: bytes, content_type: str, **headers) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def multipart(filename: str, content: bytes, preset: str = "") -> tuple[bytes, str]:
    b = uuid.uuid4().hex
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="preset"\r\n\r\n{preset}\r\n'.encode(),
             f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
             f"Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n",
             f"--{b}--\r\n".encode()]
    return b"".join(parts), f"multipart/form-data; boundary={b}"


def _checkpoint(path: Path) -> str | None:
    try:
        import torch
    except ImportError:
        return None
    g = torch.Generator().manual_seed(0)
    torch.save({"h.0.weight": torch.randn(128, 64, generator=g),
                "h.1.weight": torch.randn(64, 64, generator=g)}, path)
    return str(path)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """wtwind with six runs: healthy (LR, evals, a checkpoint, tokens), diverging to NaN, an
    odd name, a finished one (it leaves memory 2 s after it ends: history from the store),
    Emitters stay open so alerts keep firing."""
    tmp = tmp_path_factory.mktemp("web")
    with Daemon(tmpdir=str(tmp), extra_env={"WTWIND_JOBS__TIMEOUT_S": "120",
                                            "WTWIND_RUNS__ENDED_TTL_S": "2",
                                            "WTWIND_DETECTION__COOLDOWN_S": "0"}) as d:
        config = {"lr": 3e-4, "model": "gpt2-124M", "data_dir": SECRET_DIR, "api_key": "hunter2"}
        healthy = connect(d.tcp, run="healthy", config=config)
        diverging = connect(d.tcp, run="diverging")
        odd = connect(d.tcp, run=ODD_NAME)
        done = connect(d.tcp, run="finished")
        few = connect(d.tcp, run="hf-few")
        spike = connect(d.tcp, run="spiky", config={"lr": 3e-4, "model": "tiny-llama", "batch": 256,
                                                      "warmup_steps": 100, "schedule": "cosine"})
        for t in range(1, 3001):
            healthy.loss(t, curve(t), lr=3e-4 * (0.1 + 0.9 * (1 - t / 3000)), tokens=t * 131072)
            spike.loss(t, spiky(t), lr=3e-5 + 2.7e-4 * 0.5 * (1 + math.cos(math.pi * t / 3000)),
                       grad_norm=0.8 + 4.0 * (t + 10) ** -0.5 + (3.0 if t in SPIKES else 0.0),
                       tokens=t * 262144)
            if t % 250 == 0:
                healthy.eval(t, val_loss=curve(t) + 0.04)
            if t <= 2500:
                diverging.loss(t, curve(t) if t < 2400 else float("nan"))
            if t <= 50:
                odd.loss(t, curve(t))
            if t <= 100:                         # an LR x100 step at 60: kept once stored
                done.loss(t, curve(t), lr=3e-4 * (100 if t == 60 else 1), grad_norm=1.0 + t / 100)
            if t % 10 == 0 and t <= 230:         # an HF run with logging_steps=10: 23 points
                few.loss(t, curve(t), lr=5e-5, grad_norm=1.5 + 0.01 * t)
        done.close("completed")
        ckpt = _checkpoint(tmp / "step_3000.pt")
        if ckpt:
            healthy.checkpoint(3000, ckpt, want=("analyze",))
        want = {"healthy": 3000, "diverging": 2500, ODD_NAME: 50, "finished": 100, "hf-few": 230,
                "spiky": 3000}

        def caught_up():
            runs = {r["run"]: r for r in api(d, "/api/runs")[1]["runs"]}
            return all(runs.get(k, {}).get("step") == v for k, v in want.items()) and runs
        wait_for(caught_up, 60, 0.1, "every event processed")
        wait_for(lambda: not caught_up()["finished"]["live"], 30, 0.1, "the finished run to leave memory")
        d.emitters = {"healthy": healthy, "diverging": diverging, ODD_NAME: odd, "hf-few": few,
                      "spiky": spike}
        d.checkpoint = ckpt
        yield d
        for e in d.emitters.values():
            e.close(timeout=1)


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
        assert set(s) == {"step", "loss", "l_pred", "band_lo", "band_hi", "W", "lr", "grad_norm", "tokens"}
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
            em = connect(d.tcp, run="restarted")
            for t in range(501, 601):
                em.loss(t, curve(t))
            wait_for(lambda: api(d, "/api/runs/restarted")[1].get("step") == 600, 20, 0.1, "600 steps")
            p = api(d, "/api/runs/restarted")[1]
            em.close(timeout=1)
        steps = p["series"]["step"]
        early = [s for s in steps if s < 501]
        assert p["stored"] is False and 5 <= len(early) <= 64 and early[-1] <= 500
        assert steps[len(early):] == [float(t) for t in range(501, 601)]
        assert all(a < b for a, b in zip(steps, steps[1:]))
        assert len({len(v) for v in p["series"].values()}) == 1


# ---- real browser ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    exe = need_binary("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if IN_CI:
            pytest.fail("playwright (the dev extra) is required under CI=true")
        pytest.skip("playwright not installed")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    expected = "status of 400"   # Chromium logs the 400 a bad upload gets; the page handles it
    pg.on("console", lambda m: m.type == "error" and expected not in m.text and errors.append(m.text))
    yield pg
    ctx.close()
    assert errors == [], errors


PIXELS = """([sel, colors]) => {
  const c = document.querySelector(sel);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const want = colors.map(h => [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16)));
  const out = {drawn: 0, colors: colors.map(() => 0), width: c.width, height: c.height};
  for (let i = 0; i < d.length; i += 4) {
    if (!d[i + 3]) continue;
    out.drawn++;
    want.forEach((w, k) => { if (Math.abs(d[i] - w[0]) < 12 && Math.abs(d[i + 1] - w[1]) < 12
        && Math.abs(d[i + 2] - w[2]) < 12) out.colors[k]++; });
  }
  return out;
}"""
LOSS_BLUE, CRITICAL_RED = "#1f4e9c", "#d62728"


def drop_file(page, selector: str, name: str, content: bytes) -> None:
    """A real drop event carrying a File, as a user's drag from the desktop makes."""
    dt = page.evaluate_handle("""([name, b64]) => {
        const bin = atob(b64), arr = new Uint8Array(bin.length);
        for (let i = 0; i < bin.length; i++) arr[i] = bin.charCodeAt(i);
        const dt = new DataTransfer();
        dt.items.add(new File([arr], name));
        return dt; }""", [name, base64.b64encode(content).decode()])
    page.dispatch_event(selector, "drop", {"dataTransfer": dt})


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    if os.environ.get("WTWIN_UPDATE_SCREENSHOTS") == "1":
        DOC_SHOTS.mkdir(parents=True, exist_ok=True)
        return DOC_SHOTS
    return tmp_path_factory.mktemp("screenshots")


def shoot(page, folder: Path, name: str) -> None:
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000, f"{name}: the screenshot is empty"


class TestBrowser:
    def test_run_list_shows_the_runs(self, fed, page, shots):
        """The list shows every run, live and stored, its status, step, loss sparkline and
        its alerts by severity; a NaN run's loss reads "NaN"."""
        page.goto(fed.url + "/")
        page.wait_for_selector("tr.run-row >> nth=5")
        rows = page.locator("tr.run-row")
        names = [rows.nth(i).get_attribute("data-run") for i in range(rows.count())]
        assert {"healthy", "diverging", ODD_NAME, "finished", "hf-few", "spiky"} <= set(names)
        div = page.locator('tr.run-row[data-run="diverging"]')
        assert "critical" in div.locator(".badge").first.inner_text()
        assert div.locator("td.num").nth(1).inner_text() == "NaN"
        assert div.locator("svg.spark .spark-nan").count() == 1
        fin = page.locator('tr.run-row[data-run="finished"]')
        assert fin.locator(".status").inner_text() == "completed" and "stored" in fin.get_attribute("class")
        for name, least in (("healthy", 32), ("spiky", 32), ("finished", 2)):
            pts = page.locator(f'tr.run-row[data-run="{name}"] svg.spark').get_attribute("data-points")
            assert int(pts) >= least, (name, pts)
        page.wait_for_selector("#conn.ok")
        shoot(page, shots, "runs.png")
        page.locator(f'tr.run-row[data-run="{ODD_NAME}"] a').click()
        page.wait_for_selector(".chart-loss canvas")
        assert page.locator("#title").inner_text() == ODD_NAME

    def test_the_list_filters_by_status_and_searches_by_name(self, fed, page):
        """The status filter and the name search narrow the list (and the URL keeps them)."""
        page.goto(fed.url + "/")
        page.wait_for_selector("tr.run-row >> nth=5")
        page.select_option("#status", "completed")
        page.wait_for_function("() => !document.querySelector('tr.run-row[data-run=healthy]')")
        statuses = page.locator("tr.run-row .status").all_inner_texts()
        assert set(statuses) == {"completed"}            # other tests' runs may have ended too
        assert page.locator('tr.run-row[data-run="finished"]').count() == 1
        assert "status=completed" in page.url
        page.select_option("#status", "")
        page.fill("#q", "heal")
        only_healthy = ("() => { const r = document.querySelectorAll('tr.run-row');"
                        " return r.length === 1 && r[0].dataset.run === 'healthy'; }")
        page.wait_for_function(only_healthy)
        page.reload()                                    # the filter survives a reload
        page.wait_for_function(only_healthy)
        assert page.input_value("#q") == "heal" and page.input_value("#status") == ""

    def test_two_runs_overlay_by_step_and_by_tokens(self, fed, page, shots):
        """Tick two runs and compare: both losses on one chart; by tokens when both send them."""
        page.goto(fed.url + "/")
        page.wait_for_selector("tr.run-row >> nth=5")
        assert page.locator("#compare").is_disabled()
        for name in ("healthy", "spiky", "finished"):
            page.locator(f'tr.run-row[data-run="{name}"] input.pick').check()
        page.locator("#compare").click()
        page.wait_for_url("**/compare?**")
        page.wait_for_selector(".chart-compare canvas")
        page.wait_for_function("() => document.querySelectorAll('#members tr.run-row').length === 3")
        px = page.evaluate(PIXELS, [".chart-compare canvas", ["#1f4e9c", "#d62728", "#2ca02c"]])
        assert px["colors"][0] > 100 and px["colors"][1] > 100 and px["colors"][2] > 20, px  # 100 steps of 3000
        assert "peaks kept" in page.locator("#notes").inner_text()
        legend = page.locator(".chart-compare .u-legend th").all_inner_texts()
        assert any(t.strip() == "healthy" for t in legend), legend          # not upper-cased
        page.select_option("#x", "tokens")               # finished sent no tokens: by step
        assert "finished sent no tokens" in page.locator("#notes").inner_text()
        page.goto(fed.url + "/compare?runs=healthy&runs=spiky&x=tokens")
        page.wait_for_selector(".chart-compare canvas")
        page.wait_for_function("() => document.querySelector('.chart-compare .u-legend')?.textContent.includes('tokens')")
        assert page.is_checked("#logy")                  # spiky spans more than a decade
        px = page.evaluate(PIXELS, [".chart-compare canvas", ["#1f4e9c", "#d62728"]])
        assert all(n > 100 for n in px["colors"]), px
        legend = page.evaluate("() => [...document.querySelectorAll('.chart-compare .u-legend th')]"
                               ".map(th => [getComputedStyle(th).textTransform, th.innerText])")
        assert all(tt == "none" for tt, _ in legend), legend      # run names as they are
        assert any("healthy" in text for _, text in legend), legend
        shoot(page, shots, "compare.png")

    def test_run_page_plots_lr_and_grad_norm_with_readable_ticks(self, fed, page, shots):
        """spiky: log loss axis by itself, lr and grad norm drawn, its config, and its benign
        spikes in one row with a count. hf-few's constant lr of 5e-5 does not tick as "0"."""
        page.goto(fed.url + "/runs/spiky")
        page.wait_for_selector(".chart-opt canvas")
        assert page.is_checked("#logy")
        px = page.evaluate(PIXELS, [".chart-opt canvas", ["#555555", "#e07b00"]])
        assert px["colors"][0] > 100 and px["colors"][1] > 100, px
        assert page.locator('[data-config="schedule"] .value').inner_text() == "cosine"
        info = [m for m in api(fed, "/api/runs/spiky")[1]["markers"]
                if m["kind"] == "spike" and m["severity"] == "info" and m["status"] == "firing"]
        rows = page.locator("#history tr.collapsed")
        assert len(info) >= 3 and rows.count() == 1
        assert rows.locator("td").nth(3).inner_text() == f"×{len(info)}"
        assert page.locator('#history tr[data-kind="spike"]').count() == 1
        shoot(page, shots, "run-lr.png")
        page.goto(fed.url + "/runs/hf-few")
        page.wait_for_selector(".chart-opt canvas")
        ticks = page.evaluate("() => document.querySelector('#charts').runCharts.charts[2].axes[1]._values")
        assert ticks and "0" not in ticks and all("e-5" in t for t in ticks), ticks

    def test_nan_and_stored_runs_read_right(self, fed, page):
        """The NaN run's loss fact reads "NaN"; a stored run's page says it comes from the store."""
        page.goto(fed.url + "/runs/diverging")
        page.wait_for_selector(".chart-loss canvas")
        assert page.locator('[data-fact="loss"] .value').inner_text() == "NaN"
        page.goto(fed.url + "/runs/finished")
        page.wait_for_selector(".chart-loss canvas")
        assert page.locator("#stored").is_visible()
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE]])
        assert px["colors"][0] > 50, px
        # the stored page draws lr and grad norm too (issue 23), its LR x100 step at full height
        page.wait_for_selector(".chart-opt canvas")
        px = page.evaluate(PIXELS, [".chart-opt canvas", ["#555555", "#e07b00"]])
        assert px["colors"][0] > 20 and px["colors"][1] > 20, px
        lr = api(fed, "/api/runs/finished")[1]["series"]["lr"]
        assert max(lr) == pytest.approx(3e-2)

    def test_run_page_draws_the_chart_and_the_alert_marker(self, fed, page):
        """The loss canvas has the loss line and a critical marker where the NaN began."""
        page.goto(fed.url + "/runs/diverging")
        marker = page.wait_for_selector(".alert-marker.sev-critical")
        assert marker.get_attribute("data-kind") == "nonfinite"
        assert marker.get_attribute("data-step") == "2400"
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE, CRITICAL_RED]])
        assert px["drawn"] > 5000 and px["colors"][0] > 200 and px["colors"][1] > 100, px
        assert page.locator(".banner.sev-critical").count() >= 1
        assert "nonfinite" in page.locator("#history").inner_text()

    def test_run_page_shows_forecast_eval_and_spectral_and_is_screenshotted(self, fed, page, shots):
        """The healthy run's page: forecast band, eval points, W/LR chart, spectral table."""
        if fed.checkpoint:
            wait_for(lambda: api(fed, "/api/runs/healthy")[1]["spectral"], 90, 0.2, "spectral result")
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-score canvas")
        legend = page.locator(".chart-loss .u-legend").inner_text().lower()
        assert "forecast" in legend and "eval loss" in legend
        px = page.evaluate(PIXELS, [".chart-score canvas", ["#c2185b"]])
        assert px["colors"][0] > 50, px
        page.check("#logy")                      # rebuilds the loss chart on a log axis
        page.wait_for_function("() => document.querySelectorAll('.chart-loss canvas').length === 1")
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE]])
        assert px["colors"][0] > 200, px
        if fed.checkpoint:
            page.wait_for_selector("#spectral table")
            assert "step_3000.pt" in page.locator("#spectral-meta").inner_text()
        # the doc screenshot: a run with a forecast and an alert
        page.goto(fed.url + "/runs/diverging")
        page.wait_for_selector(".alert-marker.sev-critical")
        shoot(page, shots, "run.png")

    def test_a_run_with_few_points_says_why_it_has_no_forecast(self, fed, page):
        """23 points logged every 10 steps: the page says it waits for step 310, 8 more points."""
        page.goto(fed.url + "/runs/hf-few")
        text = page.wait_for_selector("#forecast-wait").inner_text()
        assert "No forecast yet" in text and "from step 300" in text
        assert "23 loss points, one every 10 steps" in text and "step 310, in about 8 more points" in text
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-loss canvas")
        assert page.locator("#forecast-wait").count() == 0

    def test_an_unknown_run_says_so(self, fed, browser):
        """/runs/<unknown> explains that the run is not (or no longer) known."""
        pg = browser.new_page()
        try:
            pg.goto(fed.url + "/runs/gone-run")
            err = pg.wait_for_selector("#facts .error")
            assert "no run named 'gone-run'" in err.inner_text()
            assert "not updating" in pg.locator("#conn").inner_text()
        finally:
            pg.close()

    def test_run_page_updates_live(self, fed, page):
        """New events show up without a reload."""
        em = fed.emitters[ODD_NAME]
        page.goto(fed.url + "/runs/" + quoted(ODD_NAME))
        step = page.locator('[data-fact="step"] .value')
        page.wait_for_function("() => document.querySelector('[data-fact=step] .value')?.textContent === '50'")
        for t in range(51, 121):
            em.loss(t, curve(t))
        page.wait_for_function("() => document.querySelector('[data-fact=step] .value')?.textContent === '120'",
                               timeout=20_000)
        assert step.inner_text() == "120"

    def test_dropping_a_real_nan_log_shows_its_alerts(self, fed, page):
        """Drop the real all-NaN llm.c log on /analyze: the nonfinite critical alert shows."""
        data = (need_shared_data() / "real-logs" / NAN_LOG).read_bytes()
        page.goto(fed.url + "/analyze")
        drop_file(page, "#drop", NAN_LOG, data)
        page.wait_for_selector("#result:not([hidden]) table.alerts")
        assert page.locator("#result-title").inner_text() == NAN_LOG
        text = page.locator("#alerts").inner_text()
        assert "nonfinite" in text and "critical" in text
        assert page.locator("#error").is_hidden()

    def test_choosing_a_clean_log_draws_it_and_is_screenshotted(self, fed, page, shots):
        """Choose a real clean log with the file picker: the same chart, benign spikes as info."""
        path = need_shared_data() / "real-logs" / CLEAN_LOG
        page.goto(fed.url + "/analyze")
        page.set_input_files("#file", str(path))
        page.wait_for_selector("#result:not([hidden]) .chart-loss canvas", timeout=90_000)
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE]])
        assert px["colors"][0] > 200, px
        assert "critical" not in page.locator("#alerts").inner_text()
        shoot(page, shots, "analyze.png")

    def test_a_bad_file_gets_a_readable_message(self, fed, page):
        """Dropping a binary file shows one sentence on the page, and no chart."""
        page.goto(fed.url + "/analyze")
        drop_file(page, "#drop", "weights.bin", b"\x00\x01\x02\x03" * 64)
        err = page.wait_for_selector("#error:not([hidden])")
        assert "weights.bin" in err.inner_text() and "binary file" in err.inner_text()
        assert err.inner_text().count("weights.bin") == 1
        assert page.locator("#result").is_hidden()
