"""Losses that are not meant to fall (issue 36): an RL value or policy loss, a GAN's, a
contrastive loss at equilibrium. The ``stationary`` preset judges them in units of their
own scatter, on run-aways against their recent best and on sustained jumps, never on
drift or plateau (a GAN generator's loss rises while its discriminator learns). The run's
kind picks it: ``run_start`` ``kind="rl"`` / ``"gan"`` / ``"contrastive"`` at the daemon,
``wtwin monitor --kind``. The bar (``z``) is the written procedure's
(tests/bench/stationary.py), with 2x of margin on every held-out source."""

from __future__ import annotations

import json
import math
import pathlib
import random
import sys

import pytest

from corpus import require_data
from helpers import Daemon, http_get, wait_for
from test_offline_cli import wtwin
from wtwin.detect import RunMonitor
from wtwin.detect.presets import PRESET_PARAMS
from wtwin.emitters import connect
from wtwin.emitters.wire import KIND_PRESETS

sys.path.insert(0, str(pathlib.Path(__file__).parent / "bench"))

import calibrate  # noqa: E402
import stationary  # noqa: E402

N, ONSET = 1500, 1000


def gan_generator(seed: int = 0, runaway: bool = False, jump: float = 0.0) -> list[float]:
    """A GAN generator's loss, logged every 100 iterations: noise of sd 0.05 around a
    level that rises slowly from 1.0 to 1.5 (healthy); from `ONSET`, a run-away growing
    5% of a scatter per point compounded, or a sustained jump of ``jump``."""
    rnd = random.Random(seed)
    out = []
    for i in range(N):
        x = 1.0 + 0.5 * i / N + rnd.gauss(0.0, 0.05)
        if i >= ONSET:
            x += jump + (0.05 * (1.05 ** (i - ONSET) - 1.0) if runaway else 0.0)
        out.append(x)
    return out


def pages(losses, preset: str = "stationary") -> list[tuple[int, str, str]]:
    mon, out = RunMonitor(preset), []
    for i, x in enumerate(losses):
        out += [(f.step, f.kind, f.severity) for f in mon.update_loss(100 * i, x).findings
                if f.active and f.severity != "info"]
    return out


class TestPreset:
    @pytest.mark.parametrize("seed", range(3))
    def test_a_slow_rise_is_the_nature_of_the_loss(self, seed):
        assert pages(gan_generator(seed)) == []

    def test_pretraining_pages_the_same_healthy_rise(self):
        """Why the preset exists: a preset for a loss that falls calls the rise a drift."""
        assert "drift" in {k for _, k, _ in pages(gan_generator(0), "pretraining")}

    @pytest.mark.parametrize("seed", range(3))
    def test_a_runaway_pages_critical_after_its_onset(self, seed):
        got = pages(gan_generator(seed, runaway=True))
        assert got and got[0][1] == "divergence" and got[0][2] == "critical"
        assert 100 * ONSET < got[0][0] <= 100 * (ONSET + 150)

    @pytest.mark.parametrize("seed", range(3))
    def test_a_sustained_jump_pages_within_three_points(self, seed):
        got = pages(gan_generator(seed, jump=1.5))       # 30 of its scatters
        assert got and got[0][1] == "spike" and got[0][2] == "warning"
        assert 100 * ONSET <= got[0][0] <= 100 * (ONSET + 3)

    def test_a_nan_pages_critical_at_once(self):
        losses = gan_generator(0)
        losses[ONSET] = math.nan
        assert pages(losses)[0] == (100 * ONSET, "nonfinite", "critical")

    def test_its_pages_say_loss_units_not_progress(self):
        mon, texts = RunMonitor("stationary"), []
        for i, x in enumerate(gan_generator(0, runaway=True)):
            texts += [f.message for f in mon.update_loss(100 * i, x).findings if f.active]
        assert texts and not any("progress" in t for t in texts)

    def test_the_kinds_that_pick_it(self):
        assert {k for k, p in KIND_PRESETS.items() if p == "stationary"} >= {"rl", "gan", "contrastive"}


@pytest.fixture(scope="module")
def data():
    require_data()
    return stationary.logs()


class TestCalibration:
    """On the corpus's RL and GAN logs (../shared/data, kinds ``rl`` and ``gan``)."""

    def test_every_clean_or_unknown_log_is_silent(self, data):
        assert len(data) >= 8
        loud = {name: p for name, label, _, pts in data if label != "anomalous"
                and (p := stationary.pages(pts))}
        assert loud == {}

    def test_the_shipped_bar_is_the_procedures_with_2x_on_every_held_out_source(self, data):
        groups = calibrate.by_group([(repo, stationary.held_runaway(pts)) for _, _, repo, pts in data])
        z = PRESET_PARAMS["stationary"]["divergence"]["z"]
        assert z == calibrate.choose(groups, None, stationary.FLOOR)
        for g, (v, thr) in calibrate.margins(groups, stationary.FLOOR).items():
            assert v == 0 or thr / v >= calibrate.MARGIN, (g, v, thr)

    def test_the_injected_failures_page_after_their_onset(self, data):
        for name, _, _, pts in data:
            if len(pts) < 100 or "gan_" not in name:
                continue
            for how in stationary.INJECTIONS:
                bad, onset = stationary.inject(pts, how)
                got = stationary.pages(bad)
                assert got and all(st >= onset for _, _, st in got), (name, how, got)


def test_wtwin_monitor_picks_it_from_the_kind(tmp_path):
    path = tmp_path / "gan.csv"
    path.write_text("step,loss\n" + "".join(f"{100 * i},{x!r}\n" for i, x in enumerate(gan_generator(0))))
    res = json.loads(wtwin("monitor", str(path), "--kind", "gan", "--json").stdout)
    assert res["preset"] == "stationary" and res["preset_from"] == "--kind"
    assert [a for a in res["alerts"] if a["severity"] != "info"] == []
    plain = json.loads(wtwin("monitor", str(path), "--json").stdout)
    assert plain["preset"] == "pretraining" and plain["alerts"]


def test_the_daemon_judges_a_gan_run_as_stationary(tmp_path):
    """Real wtwind, real emitter: ``kind="gan"`` in run_start; the healthy rise is silent at
    the trainer and on the run page, the run-away reaches the trainer critical."""
    with Daemon(tmpdir=str(tmp_path)) as d:
        got: list[dict] = []
        emit = connect(d.ipc, run="dcgan", on_alert=got.append, kind="gan")
        for i, x in enumerate(gan_generator(1, runaway=True)):
            emit.loss(100 * i, x)
        wait_for(lambda: emit.poll() or [a for a in got if a["kind"] == "divergence"], 30, 0.05,
                 "the run-away's page at the trainer")
        assert [a["kind"] for a in got if a["severity"] != "info"][0] == "divergence"
        assert min(a["step"] for a in got if a["severity"] != "info") > 100 * ONSET
        status, body = http_get(f"http://127.0.0.1:{d.http_port}/api/runs/dcgan")
        assert status == 200 and json.loads(body)["preset"] == "stationary"
        emit.close()
