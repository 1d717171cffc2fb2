"""A log of a smoothed loss (an EMA, a window mean, Keras' running epoch mean): `wtwin
monitor` recognises it and judges one point in as many as its smoothing spans
(offline/smoothed.py). A healthy run logged that way paged before; the same healthy run
judged on every point (``--every 1``) still does, so each case shows the recognition is
what silences it."""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np
import pytest

from helpers import need_shared_data

sys.path.insert(0, str(pathlib.Path(__file__).parent / "bench"))
from smoothed_logs import ema, epoch_mean, raw, window  # noqa: E402
from wtwin.offline.cli import main  # noqa: E402
from wtwin.offline.logs import read_log  # noqa: E402
from wtwin.offline.smoothed import RATIO, smoothing  # noqa: E402

STEPS = 8000


def healthy(seed: int, steps: int = STEPS) -> np.ndarray:
    """0.3 + 2 (1 + t/100)^-0.6, batch noise 0.15 (the bench's run, shorter)."""
    return raw(seed, steps)


def write(path, y, places: int = 4) -> str:
    path.write_text("step,loss\n" + "".join(
        f"{i},{'nan' if not math.isfinite(v) else f'{v:.{places}f}'}\n"
        for i, v in enumerate(y.tolist(), 1)))
    return str(path)


def monitor(capsys, *args) -> tuple[int, dict]:
    code = main(["monitor", *args, "--json", "--fail-on", "warning"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("smooth, preset, seed", [
    (window, "pretraining", 1),      # a progress bar's mean of the last 20: drift at 2549
    (ema, "finetuning", 0),          # fastai's EMA: drift at 1137
    (epoch_mean, "pretraining", 0),  # Keras' running epoch mean: spike at an epoch's reset
])
def test_a_healthy_run_logged_smoothed_does_not_page(tmp_path, capsys, smooth, preset, seed):
    path = write(tmp_path / "run.csv", smooth(healthy(seed)))
    code, every_point = monitor(capsys, path, "--preset", preset, "--every", "1")
    assert code == 1 and every_point["alerts"], "judged on every point, the healthy run pages"
    code, res = monitor(capsys, path, "--preset", preset)
    assert code == 0, res["alerts"]
    assert res["smoothed"]["every"] > 1 and res["smoothed"]["ratio"] > RATIO
    assert res["smoothed"]["points"] == STEPS


def test_a_failure_in_a_smoothed_log_still_pages(tmp_path, capsys):
    t = np.arange(1, STEPS + 1)
    x = healthy(0) + np.where(t > 5000, 0.6 * ((t - 5000) / 1000.0) ** 2, 0.0)
    code, res = monitor(capsys, write(tmp_path / "run.csv", ema(x)))
    assert res["smoothed"]["every"] > 1
    assert code == 1
    assert 5000 < res["first_alert_step"] < 6500, res["alerts"]


def test_a_non_finite_loss_in_a_smoothed_log_is_judged_at_its_step(tmp_path, capsys):
    y = window(healthy(1))
    y[6000] = math.nan                     # step 6001, between two points kept
    code, res = monitor(capsys, write(tmp_path / "run.csv", y))
    assert res["smoothed"]["every"] > 1 and 6001 % res["smoothed"]["every"] != 0
    assert code == 1
    assert res["first_alert_step"] == 6001
    assert res["alerts"][0]["kind"] == "nonfinite"


def test_the_human_output_says_why_and_how_to_judge_every_point(tmp_path, capsys):
    path = write(tmp_path / "run.csv", window(healthy(1)))
    assert main(["monitor", path]) == 0
    out = capsys.readouterr().out
    assert "the loss looks smoothed, an EMA or a running mean" in out
    assert "--every 1" in out and "Send the raw loss" in out


@pytest.mark.parametrize("name, values", [
    ("raw", healthy(0).tolist()),
    ("noiseless", (2 + 8 * (np.arange(1, 5001) + 10) ** -0.4).tolist()),
    ("noiseless, 5 decimals", np.round(2 + 8 * (np.arange(1, 5001) + 10) ** -0.4, 5).tolist()),
    ("noiseless, 4 decimals", np.round(0.3 + 2 * (1 + np.arange(1, 5001) / 100) ** -0.6, 4).tolist()),
    ("frozen", [2.5] * 3000),
    ("short", window(healthy(0, 600)).tolist()),
])
def test_what_is_not_a_smoothed_log(name, values):
    """Independent points, a noiseless curve (its third differences keep one sign), a
    staircase of printed values (mostly zero), a frozen loss, a log too short to read:
    every point judged."""
    assert smoothing(values).every == 1


def test_no_shared_log_looks_smoothed_with_twice_the_margin():
    """The 107 real logs, raw or a mean over each logging interval: the largest ratio is
    at most half of `RATIO` (2.16, a QLoRA fine-tune, against 5.5)."""
    data = need_shared_data()
    seen = {}
    for p in sorted(data.rglob("*")):
        if p.suffix not in (".csv", ".json", ".jsonl") or p.name == "manifest.csv":
            continue
        s = smoothing(read_log(p).records.loss)
        seen[p.name] = s.ratio if s.ratio == s.ratio else 0.0
        assert s.every == 1, p.name
    assert len(seen) >= 107
    worst = max(seen, key=seen.get)
    assert 2 * seen[worst] <= RATIO, (worst, seen[worst])


def test_a_blow_up_that_takes_over_a_raw_log_is_not_a_smoothing():
    """The detection harness's lr blow-up injected at step 800 of a real 1,200-point log
    (PaddleSeg's FactSeg): its growth reads as a smoothing over the log's second half
    alone (44x), not in the stretch before it, so the log is judged on every point."""
    need_shared_data()
    from corpus import entries
    from detection import inject, injection_cases, load, loss_points, noise_at, print_places
    from wtwin.offline.smoothed import _ratio

    e = next(e for e in entries() if e.name == "paddle_FactSeg_poly.csv")
    steps, x, _ = loss_points(load(e))
    kind, _, i0, H, seed = next(c for c in injection_cases(e, steps, 2, 0)
                                if c[0] == "lr_blowup" and c[2] == 800)
    y = inject(kind, steps, x, i0, noise_at(x, i0), H, np.random.default_rng(seed), print_places(x))
    assert _ratio(y[len(y) // 2:]) > 5 * RATIO
    assert smoothing(y.tolist()).every == 1


@pytest.mark.parametrize("bad", ["0", "-3", "two", "1.5"])
def test_every_takes_a_whole_number_of_points(tmp_path, capsys, bad):
    path = write(tmp_path / "run.csv", healthy(0, 1000))
    with pytest.raises(SystemExit) as e:
        main(["monitor", path, "--every", bad])
    assert e.value.code == 2
    assert f"--every takes a whole number of points >= 1, got {bad!r}" in capsys.readouterr().err


def test_every_thins_a_raw_log_by_hand(tmp_path, capsys):
    path = write(tmp_path / "run.csv", healthy(0, 1000))
    code, res = monitor(capsys, path, "--every", "10")
    assert res["smoothed"] == {"every": 10, "ratio": res["smoothed"]["ratio"], "found": 1,
                               "points": 1000}
    assert res["steps"] == 100
    assert main(["monitor", path, "--every", "10"]) == 0
    assert "judged on one loss point in 10 of 1000 (--every)" in capsys.readouterr().out
