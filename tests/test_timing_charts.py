"""The run's step time and memory on its page (docs/TIMING.md, docs/RUN_PAGE.md): the loss
events' ``step_time_s``, ``data_wait_s`` and ``mem_*`` kept as a series (only for runs
that send them), live and in the store, and drawn in headless Chromium. A real wtwind,
restarted on the same store; a real emitter."""

from __future__ import annotations

import pytest

from helpers import Daemon, run_at
from test_time_axes import GONE
from test_web_browser import browser, page  # noqa: F401 (fixtures)

from wtwin.emitters import connect

GIB = 2**30
CHARTS = "document.querySelector('#charts').runCharts"


def feed_timed(d, run: str, steps: int) -> None:
    e = connect(d.ipc, run=run)
    for t in range(1, steps + 1):
        mem = ({"mem_allocated": (10 + t / 100) * GIB, "mem_reserved": (12 + t / 100) * GIB,
                "mem_total": 80 * GIB} if t % 10 == 0 else {})
        e.loss(t, 3.0 - t / steps, step_time_s=0.2 + (0.1 if t > steps // 2 else 0.0),
               data_wait_s=0.01, gpus=8, **mem)
    e.close("completed")


class TestTimingSeries:
    def test_time_and_memory_live_after_a_restart_and_stored(self, tmp_path):
        """Every step's time and wait, every 10th step's bytes, on the live page; the page
        right after a restart is the stored page; a run without them has none."""
        d = Daemon(tmpdir=str(tmp_path)).start()
        try:
            feed_timed(d, "timed", 1500)
            e = connect(d.ipc, run="plain")
            e.loss(1, 1.0)
            e.close("completed")
            live = run_at(d, "timed", 1500, "completed")["timing"]
            assert run_at(d, "plain", 1, "completed")["timing"] is None
        finally:
            d.stop()
        assert live["step"][-1] == 1500 and live["step_time_s"][-1] == pytest.approx(0.3)
        assert live["data_wait_s"][-1] == pytest.approx(0.01)
        assert live["mem_total"][-1] == 80 * GIB and live["mem_allocated"][-1] == pytest.approx(25 * GIB)
        assert live["mem_total"][-2] is None                  # memory every 10th step only
        with Daemon(tmpdir=str(tmp_path)) as d2:
            restored = run_at(d2, "timed", 1500, "completed")["timing"]
        with Daemon(tmpdir=str(tmp_path), extra_env=GONE) as d3:
            stored = run_at(d3, "timed", 1500, "completed")["timing"]
        assert restored == stored and stored["step"][-1] == 1500
        times = [v for v in stored["step_time_s"] if v is not None]
        assert min(times) == pytest.approx(0.2) and max(times) == pytest.approx(0.3)
        assert max(v for v in stored["mem_total"] if v is not None) == pytest.approx(80 * GIB, rel=1e-6)

    def test_the_page_draws_step_time_and_memory_against_the_total(self, tmp_path, page):
        """Two charts under the run's: step time and data wait; allocated and reserved
        bytes with the device's total; their CSV exports; none for a plain run."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            feed_timed(d, "timed", 600)
            e = connect(d.ipc, run="plain")
            e.loss(1, 1.0)
            e.close("completed")
            api = run_at(d, "timed", 600, "completed")["timing"]
            run_at(d, "plain", 1, "completed")
            page.goto(f"{d.url}/runs/timed")
            page.wait_for_selector(".chart-memory canvas")
            charts = f"{CHARTS}.charts.filter(u => u.timingKind)"
            kinds, data = page.evaluate(f"[{charts}.map(u => u.timingKind), {charts}.map(u => u.data)]")
            assert kinds == ["time", "memory"]
            assert data[0] == [api["step"], api["step_time_s"], api["data_wait_s"]]
            assert data[1] == [api["step"], api["mem_allocated"], api["mem_reserved"], api["mem_total"]]
            labels = page.locator(".chart-memory .u-legend").inner_text()
            assert "allocated" in labels and "device total" in labels
            assert page.evaluate(f"{charts}[1].axes[1].values({charts}[1], [10 * 2 ** 30])") == ["10 GiB"]
            with page.expect_download() as got:
                page.click(".chart-steptime [data-export=csv]")
            assert got.value.suggested_filename == "timed-step-time.csv"
            page.goto(f"{d.url}/runs/plain")
            page.wait_for_selector(".chart-loss canvas")
            assert page.locator(".chart-steptime, .chart-memory").count() == 0
