"""Any scalar the trainer logs, on the run page (docs/RUN_PAGE.md): one chart per name, in
the real headless Chromium of `test_web_browser.py`, against a real wtwind fed by a real
emitter; the same tools as the loss: smoothing, CSV/PNG export, shared zoom, the pin."""

from __future__ import annotations

import math

import pytest

from helpers import Daemon, drag_across, wait_for
from test_web_browser import browser, page  # noqa: F401 (fixtures)
from test_web_par import legend, tensorboard_ema
from test_time_axes import GONE, stored_before_times
from web_fed import api

from wtwin.emitters import connect

RUN = "sc-page"
CHARTS = "document.querySelector('#charts').runCharts"


@pytest.fixture(scope="module")
def fed_scalars(tmp_path_factory):
    """wtwind with one run: 2,000 losses, a noisy ``train/grad_scale`` every step and an
    ``eval_acc`` every 20 steps (one NaN)."""
    tmp = tmp_path_factory.mktemp("scalars")
    with Daemon(tmpdir=str(tmp)) as d:
        e = connect(d.tcp, run=RUN)
        for t in range(1, 2001):
            e.loss(t, 2.0 + 8.0 * (t + 50) ** -0.45, lr=3e-4)
            e.scalar(t, "train/grad_scale", 1.0 + 0.5 * math.sin(t * 1.3) + t / 1000)
            if t % 20 == 0:
                e.scalar(t, "eval_acc", float("nan") if t == 1000 else t / 2000)
        wait_for(lambda: api(d, f"/api/runs/{RUN}")[1].get("step") == 2000, 60, 0.1, "every event")
        wait_for(lambda: len(api(d, f"/api/runs/{RUN}")[1]["scalars"].get("eval_acc", {}).get("step", ())) == 100,
                 30, 0.1, "every scalar")
        yield d
        e.close(timeout=1)


def download(page, selector: str):
    with page.expect_download() as got:
        page.click(selector)
    with open(got.value.path(), "rb") as f:
        return got.value.suggested_filename, f.read()


def scalar_chart(name: str) -> str:
    return f"{CHARTS}.charts.find(u => u.series[1].label === '{name}')"


class TestScalarCharts:
    def test_one_chart_per_name_smoothed_exported_zoomed_and_pinned(self, fed_scalars, page):
        """Each name has its chart (its points as the API gives them, the NaN a gap); the
        slider smooths them with TensorBoard's EMA; each exports as CSV and PNG; a drag on
        the loss chart zooms them; a click pins their legends at the loss's step."""
        d = fed_scalars
        page.goto(f"{d.url}/runs/{RUN}")
        page.wait_for_selector(".chart-scalar[data-scalar='train/grad_scale'] canvas")
        names = page.eval_on_selector_all(".chart-scalar", "els => els.map(e => e.dataset.scalar)")
        assert names == ["eval_acc", "train/grad_scale"]
        want = api(d, f"/api/runs/{RUN}")[1]["scalars"]
        steps, vals = page.evaluate(f"[{scalar_chart('eval_acc')}.data[0], {scalar_chart('eval_acc')}.data[1]]")
        assert steps == want["eval_acc"]["step"] and vals == want["eval_acc"]["value"] and None in vals
        # smoothing: the slider's weight, TensorBoard's numbers, the raw values faint behind
        page.locator("#smooth").fill("0.9")
        gs = scalar_chart("train/grad_scale")
        page.wait_for_function(f"() => {gs}.series[2].show === true")
        raw, smooth = page.evaluate(f"[{gs}.data[1], {gs}.data[2]]")
        assert smooth == pytest.approx(tensorboard_ema(raw, 0.9), rel=1e-9) and len(raw) > 1000
        assert "train/grad_scale (smoothed)" in page.locator(
            ".chart-scalar[data-scalar='train/grad_scale'] .u-legend").inner_text()
        # export: the series drawn, named after the run and the scalar
        name, body = download(page, ".chart-scalar[data-scalar='eval_acc'] [data-export=csv]")
        lines = body.decode().splitlines()
        assert name == f"{RUN}-eval_acc.csv" and lines[0] == "step,eval_acc,eval_acc (smoothed)"
        assert len(lines) == 101 and lines[-1].startswith("2000,1,")
        name, body = download(page, ".chart-scalar[data-scalar='eval_acc'] [data-export=png]")
        assert name == f"{RUN}-eval_acc.png" and body[:4] == b"\x89PNG"
        page.locator("#smooth").fill("0")
        page.wait_for_function(f"() => {gs}.series[2].show === false")
        # zoom: a drag across the loss chart narrows every chart to the same steps
        xs = f"() => {CHARTS}.charts.map(u => [u.scales.x.min, u.scales.x.max])"
        full = page.evaluate(xs)
        drag_across(page, ".chart-loss .u-over", 0.3, 0.6)
        page.wait_for_function(f"() => ({xs})().every(r => r[1] < {full[0][1]} * 0.8)")
        zoomed = page.evaluate(xs)
        assert all(z == pytest.approx(zoomed[0], abs=25) for z in zoomed), zoomed
        page.click("#reset")
        page.wait_for_function(f"() => ({xs})()[0][1] >= {full[0][1]}")
        # pin: a click on the loss chart holds the scalar legends at that step
        box = page.locator(".chart-loss .u-over").bounding_box()
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] * 0.5, y)
        page.mouse.click(box["x"] + box["width"] * 0.5, y)
        pinned = page.wait_for_selector("#charts[data-pinned]").get_attribute("data-pinned")
        gs_legend = legend(page, ".chart-scalar[data-scalar='train/grad_scale']")
        assert float(gs_legend[0].replace(",", "")) == float(pinned)
        page.mouse.move(5, 5)
        assert legend(page, ".chart-scalar[data-scalar='train/grad_scale']") == gs_legend


class TestXAxis:
    def test_the_selector_puts_every_chart_on_relative_or_wall_time(self, fed_scalars, page):
        """Relative time: every chart's x from 0 s to the run's length, its axis in
        seconds; wall time: the events' Unix times on a time axis; tokens: unavailable for
        a run that sends none; back to step: the steps."""
        d = fed_scalars
        series = api(d, f"/api/runs/{RUN}")[1]["series"]
        t0, t1 = series["time"][0], series["time"][-1]
        page.goto(f"{d.url}/runs/{RUN}")
        page.wait_for_selector(".chart-scalar[data-scalar='eval_acc'] canvas")
        assert page.locator("#xaxis option[value=tokens]").inner_text() == "tokens (unavailable)"
        assert page.locator("#xaxis option[value=tokens]").is_disabled()
        xs = f"() => {CHARTS}.charts.map(u => [u.data[0][0], u.data[0][u.data[0].length - 1], u.scales.x.time])"
        page.select_option("#xaxis", "relative")
        page.wait_for_function(f"() => {CHARTS}.charts[0].data[0][0] === 0")
        got = page.evaluate(xs)
        assert got[0] == [0, pytest.approx(t1 - t0, abs=1e-6), False]
        acc = page.evaluate(f"{scalar_chart('eval_acc')}.data[0]")
        assert acc[0] == pytest.approx(series["time"][series["step"].index(20)] - t0, abs=1e-6)
        assert acc == sorted(acc) and acc[-1] == pytest.approx(t1 - t0, abs=1e-6)
        assert page.evaluate(f"{CHARTS}.charts.map(u => u.axes[0].label)") == ["relative time"] * len(got)
        box = page.locator(".chart-loss .u-over").bounding_box()       # a pin says a time
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
        page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
        page.wait_for_selector("#charts[data-pinned]")
        note = page.locator("#pinned").inner_text()
        assert note.startswith("pinned at ") and " s · " in note and "step" not in note, note
        page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)   # released
        page.select_option("#xaxis", "wall")
        page.wait_for_function(f"() => {CHARTS}.charts[0].scales.x.time === true")
        got = page.evaluate(xs)
        assert all(g[2] is True for g in got) and got[0][0] == pytest.approx(t0) and got[0][1] == pytest.approx(t1)
        page.select_option("#xaxis", "step")
        page.wait_for_function(f"() => {CHARTS}.charts[0].scales.x.time === false")
        assert page.evaluate(xs)[0][:2] == [1, 2000]

    def test_a_history_stored_before_times_were_kept_says_unavailable(self, tmp_path, page):
        """A stored run whose loss history has no times: the time axes are disabled and
        marked unavailable; the charts stay on steps."""
        stored_before_times(tmp_path, "old", 500)
        with Daemon(tmpdir=str(tmp_path), extra_env=GONE) as d2:
            page.goto(f"{d2.url}/runs/old")
            page.wait_for_selector(".chart-loss canvas")
            for mode in ("relative", "wall", "tokens"):
                opt = page.locator(f"#xaxis option[value={mode}]")
                assert opt.is_disabled() and opt.inner_text().endswith("(unavailable)"), mode
            assert page.evaluate(f"{CHARTS}.charts[0].data[0][0]") == 1
