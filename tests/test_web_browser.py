"""The run pages in headless Chromium (Debian's, driven by Playwright; never a downloaded
browser), against a real wtwind fed by real emitters (`web_fed.fed`)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from helpers import IN_CI, REPO, need_binary, need_shared_data, stop_in_terminal, wait_for
from web_fed import CLEAN_LOG, NAN_LOG, ODD_NAME, api, curve, fed, quoted  # noqa: F401

# Screenshots go to a temporary folder; WTWIN_UPDATE_SCREENSHOTS=1 (`make screenshots`)
# writes the ones docs/HTTP.md shows, so a test run leaves the tree clean.
DOC_SHOTS = REPO / "docs" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


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

    def test_w_reads_on_a_symlog_axis_and_pages_link_their_runbook(self, fed, page):
        """Issue 37 item 8: W from -15 to 6,743 gets ticks on both sides of 0 and up to its
        thousands (the run page's own chart code); a page's runbook is a link and its
        statistics fold under "details"; the NaN run's banner links its runbook."""
        page.goto(fed.url + "/runs/diverging")
        banner = page.wait_for_selector(".banner.sev-critical a.runbook")
        assert banner.get_attribute("href").endswith("/docs/runbooks/WTwinLossNonFinite.md")
        assert "first check" in page.locator(".banner.sev-critical").first.inner_text()
        assert page.evaluate("() => document.querySelector('#charts').runCharts.charts[1].scales.y.distr") == 4
        ticks = page.evaluate("""async () => {
            const div = document.createElement("div"); div.style.width = "900px"; document.body.append(div);
            const step = Array.from({length: 400}, (_, i) => i + 1), none = step.map(() => null);
            const W = step.map(i => -15 + 6758 * (i / 400) ** 4);
            const c = new WT.RunCharts(div);
            c.update({series: {step, loss: step.map(i => 3 - i / 1000), l_pred: none, band_lo: none,
                               band_hi: none, W, lr: null, grad_norm: null},
                      eval: {step: [], val_loss: []}, markers: [], references: null});
            await new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)));   // uPlot commits later
            const out = c.charts[1].axes[1]._values; c.destroy(); div.remove(); return out; }""")
        nums = [float(t) for t in ticks if t]
        assert len(nums) >= 4 and min(nums) < 0 and 0 in nums and max(nums) >= 1000, ticks
        row = page.evaluate("""() => WT.alertTable([{step: 5, kind: "drift", severity: "warning",
            status: "firing", message: "loss rose; first check the lr: https://github.com/wtwin/wtwin/blob/main/docs/runbooks/WTwinLossDegradation.md",
            details: "W=26.31"}], "").outerHTML""")
        assert 'class="runbook"' in row and "WTwinLossDegradation.md" in row
        assert "<summary>details</summary>" in row and "W=26.31" in row

    def test_the_loss_axis_fits_the_data_not_a_runaway_forecast(self, fed, page):
        """Issue 37 item 7: a forecast that dives far below the loss leaves the axis alone
        (it is cut off); reference curves below the loss are inside it; the caption says
        what the points are, live and stored."""
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-loss canvas")
        assert "newest 1,024 points as logged" in page.locator("#series-caption").inner_text()
        ys = page.evaluate("""async () => {
            const div = document.createElement("div"); div.style.width = "900px"; document.body.append(div);
            const step = Array.from({length: 300}, (_, i) => i + 1), none = step.map(() => null);
            const loss = step.map(i => 3 - i / 300), l_pred = step.map(i => 3 - i / 5);
            const p = {series: {step, loss, l_pred, band_lo: l_pred.map(v => v - 1), band_hi: l_pred.map(v => v + 1),
                                W: none, lr: null, grad_norm: null},
                       eval: {step: [], val_loss: []}, markers: [], references: null};
            const c = new WT.RunCharts(div), drawn = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)));
            c.update(p);
            await drawn();
            const alone = [c.charts[0].scales.y.min, c.charts[0].scales.y.max];
            c.update(Object.assign({}, p, {references: {curves: {ref: {step: [1, 300], loss: [2.5, 0.5]}}}}));
            await drawn();
            const refs = [c.charts[0].scales.y.min, c.charts[0].scales.y.max];
            c.destroy(); div.remove(); return [alone, refs]; }""")
        (lo, hi), (rlo, _) = ys
        assert 1.8 < lo < 2.0 and 3.0 < hi < 3.2, ys        # not the forecast's -57
        assert rlo <= 0.5, ys                               # the reference is inside
        page.goto(fed.url + "/runs/finished")
        page.wait_for_selector(".chart-loss canvas")
        assert "lowest and highest value" in page.locator("#series-caption").inner_text()

    def test_the_reference_gap_has_no_stripes_at_eval_steps(self, fed, page):
        """Issue 37 item 6: the shaded gap to a reference is as dense at an eval step (a row
        of its own in the joined data) as beside it."""
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-loss canvas")
        cols = page.evaluate("""async () => {
            const div = document.createElement("div"); div.style.width = "900px"; document.body.append(div);
            const step = Array.from({length: 1000}, (_, i) => i + 0.5), none = step.map(() => null);
            const loss = step.map(s => 3 - s / 1000);
            const c = new WT.RunCharts(div);
            c.update({series: {step, loss, l_pred: none, band_lo: none, band_hi: none, W: none, lr: null,
                               grad_norm: null},
                      eval: {step: [150, 250, 350, 450, 550, 650, 750, 850, 950], val_loss: Array(9).fill(2.9)},
                      markers: [], references: {curves: {ref: {step: [0, 1000], loss: [2.2, 1.2]}}}});
            await new Promise(r => requestAnimationFrame(() => setTimeout(r, 50)));
            const u = c.charts[0], ctx = u.ctx, y = Math.round(u.valToPos(2.0, "y", true));
            const alpha = s => ctx.getImageData(Math.round(u.valToPos(s, "x", true)), y, 1, 1).data[3];
            const out = [alpha(450), alpha(453), alpha(447), alpha(650)];   // evals at 450, 650
            c.destroy(); div.remove(); return out; }""")
        assert min(cols) > 0 and max(cols) - min(cols) <= 2, cols

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

    def test_make_demo_leaves_the_caught_run_open_and_is_screenshotted(self, page, shots):
        """`make demo` in a terminal: the URL it prints opens the caught run's page, with
        the drift's warning banner and its marker; docs/screenshots/demo.png (README)."""
        import pty
        import signal
        import subprocess
        import sys

        from helpers import free_port, read_until

        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env["DEMO_PORT"] = str(free_port())
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "wtwin.offline.daemon_demo"], cwd=REPO,
                                stdin=slave, stdout=slave, stderr=slave, env=env)
        os.close(slave)
        try:
            m, text = read_until(master, r"(http://\S+/runs/demo-degrading)\s.*Ctrl-C", 240)
            assert m is not None, text
            page.goto(m.group(1))
            page.wait_for_selector(".banner.sev-critical, .banner.sev-warning")
            page.wait_for_selector(".alert-marker.sev-warning")
            assert "drift" in page.locator(".banner").first.inner_text()
            px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE]])
            assert px["colors"][0] > 200, px
            shoot(page, shots, "demo.png")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 0
        finally:
            stop_in_terminal(proc, master)

    def test_a_bad_file_gets_a_readable_message(self, fed, page):
        """Dropping a binary file shows one sentence on the page, and no chart."""
        page.goto(fed.url + "/analyze")
        drop_file(page, "#drop", "weights.bin", b"\x00\x01\x02\x03" * 64)
        err = page.wait_for_selector("#error:not([hidden])")
        assert "weights.bin" in err.inner_text() and "binary file" in err.inner_text()
        assert err.inner_text().count("weights.bin") == 1
        assert page.locator("#result").is_hidden()
