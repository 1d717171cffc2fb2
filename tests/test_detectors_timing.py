"""The run's time and memory (issue 39): `throughput` and `memory`, alone and in the monitor.

Synthetic streams with exact timestamps: what each must page and what must stay silent
(periodic checkpoints, the first steps, a resume, an announced ramp, a sawtooth, a growth
that levels off), and that the compiled and pure builds say the same."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

from wtwin.detect import RunMonitor
from wtwin.detect.memory import MemoryDetector
from wtwin.detect.throughput import ThroughputDetector

GIB = float(2 ** 30)


def clocked(n, step_s=0.2, slow_from=None, factor=1.5, ckpt_every=0, ckpt_s=20.0, jitter=0.05,
            seed=0, log_every=1):
    """(step, ts) of a run whose steps take ``step_s`` (x ``factor`` from ``slow_from``)
    with a ``ckpt_s`` stall every ``ckpt_every`` steps."""
    rng = random.Random(seed)
    ts = 1.7e9
    for t in range(1, n + 1):
        ts += step_s * (factor if slow_from and t >= slow_from else 1.0) * (1 + jitter * rng.random())
        if ckpt_every and t % ckpt_every == 0:
            ts += ckpt_s
        if t % log_every == 0:
            yield t, ts


def first_active(det, events, **kw):
    for t, ts in events:
        if det.update(t, 1.0, ts=ts, **kw).active:
            return t
    return None


class TestThroughput:
    def test_a_sustained_slowdown_pages_after_its_hold(self):
        """1.5x slower from step 3,000 at 0.2 s a step: active once held 180 s (~600 steps)."""
        det = ThroughputDetector()
        first = first_active(det, clocked(5000, slow_from=3000))
        assert first is not None and 3000 < first < 3000 + 700
        text = det.message(first, 1.0)
        assert "1.5x" in text and "since step 3,0" in text and "for 3 min" in text

    def test_periodic_checkpoints_that_take_20_s_are_silent(self):
        """A 20 s checkpoint every 500 steps of 0.2 s, logged every step or every 10th."""
        for log_every in (1, 10):
            det = ThroughputDetector()
            assert first_active(det, clocked(20000, ckpt_every=500, log_every=log_every)) is None

    @pytest.mark.parametrize("log_every", [10, 50])
    def test_20_s_checkpoints_as_a_step_clock_reports_them_are_silent(self, log_every):
        """The trainer's own means (`StepClock`): a 20 s save every 500 steps of 0.2 s is
        the next step's data wait, inside the mean ``step_time_s`` and ``data_wait_s`` of
        its interval; in the monitor, no page of any kind (the loss is healthy)."""
        mon, rng, ts, pages = RunMonitor(), random.Random(1), 1.7e9, []
        total = wait = 0.0
        for t in range(1, 20001):
            step = 0.2 * (1 + 0.05 * rng.random())
            stall = 20.0 if t % 500 == 1 and t > 1 else 0.0
            total, wait = total + step + stall, wait + 0.01 + stall
            ts += step + stall
            if t % log_every == 0:
                timing = {"step_time_s": total / log_every, "data_wait_s": wait / log_every}
                total = wait = 0.0
                st = mon.update_loss(t, 2.5 + 9.0 * t ** -0.35 + rng.gauss(0, 0.01), ts=ts,
                                     timing=timing)
                pages += [f.kind for f in st.findings if f.active and f.severity != "info"]
        assert pages == []

    def test_slow_first_steps_are_silent(self):
        """Compilation: the first 15 steps take 30 s, then 0.2 s."""
        det = ThroughputDetector()
        ts = 0.0
        for t in range(1, 3000):
            ts += 30.0 if t < 15 else 0.2
            assert not det.update(t, 1.0, ts=ts).active

    def test_a_resume_is_silent_and_starts_over(self):
        """The step goes back and hours of wall time passed: no page, a new baseline."""
        mon = RunMonitor()
        ts, pages = 1.7e9, []
        for t in list(range(1, 3001)) + list(range(2500, 6001)):
            ts += 0.2 if t != 2500 else 7200.0
            pages += [f for f in mon.update_loss(t, 3.0 + 5 * t ** -0.3, ts=ts).findings
                      if f.kind == "throughput"]
        assert pages == []

    def test_an_announced_phase_change_rebases(self):
        """A batch ramp announced by ``phase``: steps twice as long, no page."""
        mon = RunMonitor()
        ts = 1.7e9
        for t in range(1, 6001):
            ts += 0.2 if t < 3000 else 0.4
            st = mon.update_loss(t, 3.0 + 5 * t ** -0.3, ts=ts,
                                 timing={"phase": 0 if t < 3000 else 1})
            assert not [f for f in st.findings if f.kind == "throughput"]

    def test_tokens_judge_the_rate_of_tokens(self):
        """A batch ramp with ``tokens`` sent: twice the tokens per step in twice the time is
        the same rate (silent); the same tokens per step in 1.6x the time pages."""
        for slower, pages in ((1.0, False), (1.6, True)):
            det, ts, tok, on = ThroughputDetector(), 0.0, 0.0, False
            for t in range(1, 6001):
                ramp = 2.0 if t >= 3000 else 1.0
                ts += 0.2 * ramp * (slower if t >= 3000 else 1.0)
                tok += 4096 * ramp
                on |= det.update(t, 1.0, ts=ts, tokens=tok).active
            assert on == pages
            if pages:
                assert "tokens/s" in det.message(t, 1.0)

    def test_it_resolves_when_the_rate_is_back(self):
        det = ThroughputDetector()
        ts, seen = 0.0, []
        for t in range(1, 8001):
            ts += 0.3 if 3000 <= t < 5000 else 0.2
            seen.append(det.update(t, 1.0, ts=ts).active)
        assert any(seen[3000:5000]) and not any(seen[5200:])

    def test_data_starvation_is_named(self):
        """The extra time is the wait for data: named; a slower compute is not."""
        for wait_after, named in ((0.11, True), (0.01, False)):
            det, ts = ThroughputDetector(), 0.0
            for t in range(1, 5001):
                ts += 0.3 if t >= 3000 else 0.2
                det.update(t, 1.0, ts=ts, data_wait=0.01 if t < 3000 else wait_after)
            assert det.active and ("data starvation" in det.message(t, 1.0)) == named

    def test_the_trainers_step_time_is_read_when_sent(self):
        det = ThroughputDetector()
        first = None
        for t in range(1, 5001):
            st = det.update(t, 1.0, ts=float(t), step_time=0.3 if t >= 3000 else 0.2)
            if st.active and first is None:
                first = t
        assert first is not None and "steps take 0.3 s" in det.message(first, 1.0)

    def test_no_timing_no_verdict(self):
        det = ThroughputDetector()
        for t in range(1, 2000):
            assert not det.update(t, 1.0).active
        assert det.slowdown == 1.0 and not det.verdict().active


def memory_run(used, n=600, every_s=60.0, total=48 * GIB):
    """First report at which ``used(i)`` (GiB at report i) pages, with the ETA then."""
    det = MemoryDetector()
    for i in range(1, n):
        if det.update(i * 100, 1.0, ts=every_s * i, reserved=used(i) * GIB, total=total).active:
            return i, det
    return None, det


class TestMemory:
    def test_a_leak_pages_before_the_total(self):
        """1 GiB/h from 40 of 48 GiB: paged ~2 h before it gets there."""
        i, det = memory_run(lambda i: 40 + i / 60)
        assert i is not None
        hours_left = (48 - (40 + i / 60))
        assert 1.5 <= hours_left <= 2.05
        assert "GiB/h" in det.message(i * 100, 1.0) and "48 GiB reached in about" in det.message(0, 1.0)

    @pytest.mark.parametrize("seed", range(3))
    def test_a_sawtooth_is_silent(self, seed):
        rng = random.Random(seed)
        i, _ = memory_run(lambda i: 40 + (i % 7) * 0.5 + rng.random(), n=3000)
        assert i is None

    @pytest.mark.parametrize("tau", [3, 20, 100, 300])
    def test_a_growth_that_levels_off_is_silent(self, tau):
        """Fragmentation: +6 GiB approached exponentially, 6 GiB short of the total."""
        i, _ = memory_run(lambda i: 36 + 6 * (1 - math.exp(-i / tau)), n=3000)
        assert i is None

    def test_a_page_holds_while_the_step_rate_wobbles(self):
        """The leak's growth per second follows the step rate (a shared machine: x0.3 to
        x1.7 for stretches of 20 reports): once paging, no resolve until the total."""
        rng, det, used, states = random.Random(3), MemoryDetector(), 40.0, []
        rate = 1.0
        for i in range(1, 2000):
            if i % 20 == 0:
                rate = rng.uniform(0.3, 1.7)
            used += rate / 60
            if used >= 48:
                break
            det.update(i * 100, 1.0, ts=60.0 * i, reserved=used * GIB, total=48 * GIB)
            states.append(det.active)
        first = states.index(True)
        assert all(states[first:]), "the page flapped"
        assert len(states) - first >= 30     # reports (minutes) before the total

    def test_the_message_says_when_at_which_step_and_the_last_checkpoint(self):
        """The issue's sentence: rate, total, time, "at step ~N" (two digits: a forecast),
        and the last checkpoint, which a snapshot keeps."""
        mon = RunMonitor()
        for i in range(1, 400):
            if i == 300:
                mon.checkpoint(30_000)
            st = mon.update_loss(i * 100, 3.0, ts=60.0 * i,
                                 timing={"mem_reserved": (40 + i / 60) * GIB, "mem_total": 48 * GIB})
            page = [f for f in st.findings if f.kind == "memory" and f.active]
            if page:
                break
        text = page[0].message
        assert text.startswith("reserved memory grows 1 GiB/h (now 4"), text
        assert "48 GiB reached in about 1 h 5" in text and "(at step ~48,000)" in text
        assert "). Last checkpoint: step 30,000" in text
        twin = RunMonitor()
        twin.restore(mon.snapshot())
        assert twin.detectors["memory"]._ckpt == 30_000

    def test_critical_within_a_quarter_of_the_horizon(self):
        det = MemoryDetector()
        sev = set()
        for i in range(1, 470):
            det.update(i * 100, 1.0, ts=60.0 * i, reserved=(40 + i / 60) * GIB, total=48 * GIB)
            if det.active:
                sev.add(det.verdict().severity)
        assert sev == {"warning", "critical"}


class TestInTheMonitor:
    def test_a_throughput_page_beside_a_loss_page(self):
        """Both kinds page: the loss's drift is not silenced by the slowdown, nor it by the drift."""
        mon = RunMonitor()
        rng = random.Random(0)
        kinds = set()
        ts = 1.7e9
        for t in range(1, 8001):
            ts += 0.3 if t > 4000 else 0.2
            loss = 2.5 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05) + max(0.0, t - 5000) * 1e-4
            kinds |= {f.kind for f in mon.update_loss(t, loss, ts=ts).findings
                      if f.active and f.severity != "info"}
        assert {"throughput", "drift"} <= kinds

    def test_memory_pages_in_the_monitor_and_snapshots_round_trip(self):
        mon = RunMonitor()
        found = []
        for i in range(1, 400):
            st = mon.update_loss(i * 100, 3.0, ts=60.0 * i,
                                 timing={"mem_reserved": (40 + i / 60) * GIB, "mem_total": 48 * GIB})
            found += [f for f in st.findings if f.kind == "memory"]
            if i == 200:
                twin = RunMonitor()
                twin.restore(mon.snapshot())
                assert twin.snapshot() == mon.snapshot()
        assert found and found[0].active and found[0].severity == "warning"


PROBE = r"""
import json, random, sys
from wtwin.detect import COMPILED, RunMonitor
mon, rng, ts, out = RunMonitor(), random.Random(0), 1.7e9, []
for t in range(1, 6001):
    ts += 0.2 * (1.5 if t > 3000 else 1.0) * (1 + 0.05 * rng.random()) + (20.0 if t % 500 == 0 else 0.0)
    st = mon.update_loss(t, 2 + 5 * t ** -0.3 + rng.gauss(0, 0.02), ts=ts,
                         timing={"data_wait_s": 0.01 if t <= 3000 else 0.11, "gpus": 64,
                                 "mem_reserved": (10 + t / 600) * 2 ** 30, "mem_total": 24 * 2 ** 30})
    out += [list(f) for f in st.findings]
print(json.dumps({"compiled": COMPILED, "findings": out, "snap": mon.snapshot()["detectors"]["throughput"]}))
"""


def test_compiled_and_pure_builds_say_the_same():
    """The same timed run in each build, each in its own process: the same findings."""
    outs = []
    for pure in (True, False):
        env = {k: v for k, v in os.environ.items() if k != "WTWIN_PURE_PYTHON"}
        if pure:
            env["WTWIN_PURE_PYTHON"] = "1"
        res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        outs.append(json.loads(res.stdout))
    assert not outs[0]["compiled"]
    if not outs[1]["compiled"]:
        pytest.skip("no compiled build here")
    assert outs[0]["findings"] == outs[1]["findings"] and outs[0]["findings"]
    assert outs[0]["snap"] == outs[1]["snap"]


def test_wtwin_monitor_reads_a_logs_time_columns_only_when_asked(tmp_path, capsys):
    """A CSV with ``ts`` and ``data_wait_s``: ``--timing`` pages the slowdown and names the
    data loader; without it the same log gives what it always gave (the loss only)."""
    from wtwin.offline.cli import main
    rng, ts = random.Random(0), 1.7e9
    lines = ["step,loss,ts,data_wait_s"]
    for t in range(1, 6001):
        ts += 0.2 * (1.5 if t > 3000 else 1.0) * (1 + 0.05 * rng.random()) + (20.0 if t % 500 == 0 else 0.0)
        lines.append(f"{t},{2 + 5 * t ** -0.3 + rng.gauss(0, 0.02)},{ts:.3f},{0.01 if t <= 3000 else 0.11}")
    path = tmp_path / "timed.csv"
    path.write_text("\n".join(lines) + "\n")
    outs = []
    for extra in (["--timing"], []):
        main(["monitor", str(path), "--json", *extra])
        outs.append(json.loads(capsys.readouterr().out))
    (page,) = outs[0]["alerts"]
    assert page["kind"] == "throughput" and "data starvation" in page["message"]
    assert outs[1]["alerts"] == []
