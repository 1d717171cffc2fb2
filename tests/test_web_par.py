"""Issue 37 item 9: the run page on par with TensorBoard and W&B (docs/RUN_PAGE.md), in the
real headless Chromium of `test_web_browser.py`, against the real wtwind of `web_fed.fed`:
smoothing, dark mode, CSV and PNG export, a cursor a click pins."""

from __future__ import annotations

import struct

import pytest

from helpers import drag_across
from test_web_browser import LOSS_BLUE, PIXELS, browser, page, shoot, shots  # noqa: F401 (fixtures)
from web_fed import api, fed  # noqa: F401 (fixture)

LOSS = "document.querySelector('#charts').runCharts.charts[0]"


def tensorboard_ema(ys: list, weight: float) -> list:
    """TensorBoard's smoothing (its `resampleData`... `smooth`): EMA, debiased, non-finite skipped."""
    last, n, out = 0.0, 0, []
    for y in ys:
        if y is None:
            out.append(None)
            continue
        last = last * weight + (1 - weight) * y
        n += 1
        out.append(last / (1 - weight ** n))
    return out


def legend(page, chart: str) -> list[str]:
    return page.locator(f"{chart} .u-legend .u-value").all_inner_texts()


class TestSmoothing:
    def test_the_slider_draws_tensorboards_ema_over_the_faint_raw_loss(self, fed, page):
        """At 0.9 the loss chart draws the debiased EMA (TensorBoard's numbers) in the loss
        colour, the raw loss faint behind; the weight survives a reload."""
        page.goto(fed.url + "/runs/spiky")
        page.wait_for_selector(".chart-loss canvas")
        assert page.locator("#smooth-value").inner_text() == "off"
        assert page.evaluate(f"{LOSS}.series[6].show") is False
        assert "smoothed" not in page.locator(".chart-loss .u-legend").inner_text()
        page.locator("#smooth").fill("0.9")
        page.wait_for_function(f"() => {LOSS}.series[6].show === true")
        assert page.locator("#smooth-value").inner_text() == "0.90"
        steps, raw, smooth = page.evaluate(f"[{LOSS}.data[0], {LOSS}.data[1], {LOSS}.data[6]]")
        want = tensorboard_ema(raw, 0.9)
        assert len(smooth) == len(raw) > 1000
        assert all(a == pytest.approx(b, rel=1e-9) for a, b in zip(smooth, want) if b is not None)
        late = [i for i, s in enumerate(steps) if s > 500]                # past the steep start
        jumps = lambda ys: max(abs(ys[i] - ys[i - 1]) for i in late)     # noqa: E731
        assert jumps(smooth) < jumps(raw) / 3                            # the spikes are smoothed
        assert page.evaluate(f"{LOSS}.series[1].stroke({LOSS}, 1)").startswith("rgba(31,78,156,0.2")
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE]])
        assert px["colors"][0] > 200, px                                 # the smoothed line
        assert "loss (smoothed)" in page.locator(".chart-loss .u-legend").inner_text()
        page.reload()
        page.wait_for_function(f"() => {LOSS}?.series[6].show === true")
        assert page.input_value("#smooth") == "0.9"
        page.locator("#smooth").fill("0")
        page.wait_for_function(f"() => {LOSS}.series[6].show === false")
        assert page.evaluate(f"{LOSS}.series[1].stroke({LOSS}, 1)") == LOSS_BLUE


    def test_compare_smooths_each_run_over_its_own_points(self, fed, page):
        """The remembered weight smooths every compared loss: one smoothed series per run,
        TensorBoard's EMA over that run's points only (the other run's rows skipped)."""
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-loss canvas")
        page.locator("#smooth").fill("0.8")
        page.wait_for_function(f"() => {LOSS}.series[6].show === true")
        page.goto(fed.url + "/compare?runs=healthy&runs=finished")
        page.wait_for_selector(".chart-compare canvas")
        assert page.input_value("#smooth") == "0.8"
        labels = page.locator(".chart-compare .u-legend th").all_inner_texts()
        assert [t.strip() for t in labels][1:] == ["healthy", "finished", "healthy (smoothed)", "finished (smoothed)"]
        data = page.evaluate("document.querySelector('#chart').plot.data")
        for raw, smooth in ((data[1], data[3]), (data[2], data[4])):
            mine = [i for i, v in enumerate(raw) if v is not None]
            want = tensorboard_ema([raw[i] for i in mine], 0.8)
            assert [smooth[i] for i in mine] == pytest.approx(want, rel=1e-9)
            assert all(smooth[i] is None for i in range(len(raw)) if raw[i] is None)


    def test_the_analyze_page_smooths_and_exports_a_dropped_log(self, fed, page):
        """The weight chosen on a run page smooths a log chosen on /analyze too; its loss
        exports under the file's name."""
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-loss canvas")
        page.locator("#smooth").fill("0.5")
        page.wait_for_function(f"() => {LOSS}.series[6].show === true")
        page.goto(fed.url + "/analyze")
        rows = "".join(f"{t},{2 + 8 * (t + 50) ** -0.45 + 0.05 * (t % 7 == 0)}\n" for t in range(1, 401))
        page.set_input_files("#file", files=[{"name": "tiny run.csv", "mimeType": "text/csv",
                                               "buffer": ("step,loss\n" + rows).encode()}])
        page.wait_for_selector("#result:not([hidden]) .chart-loss canvas")
        assert page.input_value("#smooth") == "0.5"
        raw, smooth = page.evaluate(f"[{LOSS}.data[1], {LOSS}.data[6]]")
        assert smooth == pytest.approx(tensorboard_ema(raw, 0.5), rel=1e-9) and len(raw) == 400
        name, body = TestExport.download(page, ".chart-loss [data-export=csv]")
        assert name == "tiny_run-loss.csv" and body.decode().count("\n") == 401


class TestDarkMode:
    def test_the_pages_follow_prefers_color_scheme(self, fed, page, shots):
        """Emulated dark: dark background, light axes, a light loss line; back to light
        without a reload, the charts redrawn in the light colours."""
        page.emulate_media(color_scheme="dark")
        page.goto(fed.url + "/runs/spiky")
        page.wait_for_selector(".chart-opt canvas")
        bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(21, 25, 31)", bg
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE, "#6ea8fe", "#c9d1d9"]])
        assert px["colors"][0] == 0 and px["colors"][1] > 200 and px["colors"][2] > 100, px
        page.locator("#smooth").fill("0.9")                 # the doc screenshot: dark, smoothed
        page.wait_for_function(f"() => {LOSS}.series[6].show === true")
        shoot(page, shots, "run-dark.png")
        page.locator("#smooth").fill("0")
        page.wait_for_function(f"() => {LOSS}.series[6].show === false")
        page.emulate_media(color_scheme="light")
        page.wait_for_function("() => getComputedStyle(document.body).backgroundColor === 'rgb(255, 255, 255)'")
        page.wait_for_function(f"() => {LOSS}?.series[1].stroke({LOSS}, 1) === '{LOSS_BLUE}'")
        px = page.evaluate(PIXELS, [".chart-loss canvas", [LOSS_BLUE, "#6ea8fe"]])
        assert px["colors"][0] > 200 and px["colors"][1] == 0, px

    def test_the_run_list_and_compare_are_dark_too(self, fed, page):
        """The list's sparklines and the compare chart take the dark colours."""
        page.emulate_media(color_scheme="dark")
        page.goto(fed.url + "/")
        page.wait_for_selector("tr.run-row svg.spark path")
        stroke = page.evaluate("getComputedStyle(document.querySelector('svg.spark path')).stroke")
        assert stroke == "rgb(110, 168, 254)", stroke
        page.goto(fed.url + "/compare?runs=healthy&runs=spiky")
        page.wait_for_selector(".chart-compare canvas")
        px = page.evaluate(PIXELS, [".chart-compare canvas", [LOSS_BLUE, "#6ea8fe"]])
        assert px["colors"][0] == 0 and px["colors"][1] > 100, px


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    return struct.unpack(">II", data[16:24])


class TestExport:
    @staticmethod
    def download(page, selector: str):
        with page.expect_download() as got:
            page.click(selector)
        d = got.value
        with open(d.path(), "rb") as f:
            return d.suggested_filename, f.read()

    def test_every_run_chart_exports_its_series_as_csv_and_png(self, fed, page):
        """spiky's loss, W and lr charts: a CSV of the series drawn (the loss's last row is
        the run's last loss) and a PNG the size of the chart's canvas."""
        page.goto(fed.url + "/runs/spiky")
        page.wait_for_selector(".chart-opt canvas")
        last = api(fed, "/api/runs/spiky")[1]["series"]
        for cls, what, header in ((".chart-loss", "loss", "step,loss,forecast,band low,band high,eval loss"),
                                  (".chart-score", "w", "step,W"), (".chart-opt", "lr", "step,lr,grad norm")):
            name, body = self.download(page, f"{cls} [data-export=csv]")
            assert name == f"spiky-{what}.csv"
            lines = body.decode().splitlines()
            assert lines[0] == header, lines[0]
            n = page.evaluate(f"document.querySelector('{cls}').querySelector('.uplot') && "
                              f"document.querySelector('#charts').runCharts.charts"
                              f"[{['loss', 'w', 'lr'].index(what)}].data[0].length")
            assert len(lines) == n + 1 > 1000
            if what == "loss":
                step, loss = lines[-1].split(",")[:2]
                assert float(step) == last["step"][-1] and float(loss) == pytest.approx(last["loss"][-1])
            name, body = self.download(page, f"{cls} [data-export=png]")
            assert name == f"spiky-{what}.png"
            size = page.evaluate(f"[document.querySelector('{cls} canvas').width, "
                                 f"document.querySelector('{cls} canvas').height]")
            assert png_size(body) == tuple(size) and len(body) > 5000

    def test_the_smoothed_loss_is_exported_and_compare_exports_too(self, fed, page):
        """With the smoothing on the loss CSV has its column; the compare chart exports."""
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-loss canvas")
        page.locator("#smooth").fill("0.6")
        page.wait_for_function(f"() => {LOSS}.series[6].show === true")
        _, body = self.download(page, ".chart-loss [data-export=csv]")
        head, *rows = body.decode().splitlines()
        assert head.endswith(",loss (smoothed)")
        assert rows[-1].split(",")[-1] != ""
        page.goto(fed.url + "/compare?runs=healthy&runs=spiky")
        page.wait_for_selector(".chart-compare canvas")
        name, body = self.download(page, ".chart-compare [data-export=csv]")
        head = "step,healthy,spiky,healthy (smoothed),spiky (smoothed)"     # the weight is remembered
        assert name == "compare-step.csv" and body.decode().splitlines()[0] == head
        name, body = self.download(page, ".chart-compare [data-export=png]")
        assert name == "compare-step.png" and png_size(body)[0] > 300


class TestPinnedLegend:
    def test_a_click_pins_the_values_of_every_chart_until_the_next(self, fed, page):
        """Hover the loss chart: the legends read the values there (uPlot's live legend);
        click: they stay at that step as the mouse moves over another chart and through a
        poll; click again: they follow the mouse."""
        page.goto(fed.url + "/runs/healthy")
        page.wait_for_selector(".chart-opt canvas")
        box = page.locator(".chart-loss .u-over").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
        page.wait_for_function("() => document.querySelector('.chart-loss .u-legend .u-value').textContent !== '--'")
        page.mouse.click(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
        pinned = page.wait_for_selector("#charts[data-pinned]").get_attribute("data-pinned")
        assert f"pinned at step {pinned}" in page.locator("#pinned").inner_text()
        loss_values, w_values = legend(page, ".chart-loss"), legend(page, ".chart-score")
        assert loss_values[0] == w_values[0] != "--"            # both charts at the same step
        assert float(loss_values[0].replace(",", "")) == float(pinned)
        opt = page.locator(".chart-opt .u-over").bounding_box()
        page.mouse.move(opt["x"] + opt["width"] * 0.8, opt["y"] + 20)   # another chart, another step
        page.mouse.move(opt["x"] + opt["width"] * 0.9, opt["y"] + 30)
        page.mouse.move(5, 5)                                            # and off the charts
        page.evaluate("window.__seen = document.querySelector('#charts').runCharts.last")
        page.wait_for_function("() => document.querySelector('#charts').runCharts.last !== window.__seen",
                               timeout=10_000)                          # a poll redrew the charts
        assert legend(page, ".chart-loss") == loss_values
        assert legend(page, ".chart-score") == w_values
        assert legend(page, ".chart-opt")[0] == loss_values[0]
        page.mouse.click(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
        page.wait_for_selector("#charts:not([data-pinned])")
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
        page.wait_for_function("v => document.querySelector('.chart-loss .u-legend .u-value').textContent !== v",
                               arg=loss_values[0])


class TestZoom:
    def test_a_drag_zooms_every_chart_and_reset_restores_them(self, fed, page):
        """Drag across the loss chart: the loss, W and lr charts show the same narrower
        steps (the shared cursor carries the zoom), the cursor is not pinned; "reset
        zoom" brings back the whole run."""
        page.goto(fed.url + "/runs/spiky")
        page.wait_for_selector(".chart-opt canvas")
        xs = "() => document.querySelector('#charts').runCharts.charts.map(u => [u.scales.x.min, u.scales.x.max])"
        full = page.evaluate(xs)
        drag_across(page, ".chart-loss .u-over", 0.3, 0.6, steps=10)
        page.wait_for_function(f"() => ({xs})()[0][1] < {full[0][1]} * 0.8")
        zoomed = page.evaluate(xs)
        lo, hi = zoomed[0]
        assert 600 < lo < 1200 and 1500 < hi < 2100, zoomed
        assert all(z == pytest.approx(zoomed[0], abs=2) for z in zoomed), zoomed
        assert page.locator("#charts[data-pinned]").count() == 0
        page.click("#reset")
        page.wait_for_function(f"() => ({xs})()[0][1] >= {full[0][1]}")
        assert page.evaluate(xs) == full
