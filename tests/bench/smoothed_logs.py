"""Healthy runs whose log prints a smoothed loss: how many page, judged on every point
(as the daemon judges a stream) and as ``wtwin monitor`` judges the log (one point in as
many as its smoothing spans, offline/smoothed.py).

Many trainers print a loss that is already smoothed: fastai's recorder keeps an EMA
(beta 0.98), a Keras callback's per-batch ``logs["loss"]`` is the running mean since the
epoch began, a progress bar shows the mean of the last 20 batches. The detectors' noise
models read the scatter from one point to the next; in a smoothed log that scatter is a
few hundredths of the batch noise, while the level still wanders as much as in the raw
log. The significance tests then pass a wander the size of the gate, and the gate alone
(1% of the progress) does not hold it. ``wtwin monitor`` recognises such a log from the
whole of it and keeps the points the smoothing left apart.

Each case is the same healthy run (a loss ``0.3 + 2 (1 + t/100)^-0.6`` with a batch noise
of 0.15, 20,000 steps, one point a step, 4 decimals), logged raw (the control) or
smoothed, three seeds, under ``pretraining`` and ``finetuning``, replayed as ``wtwin
monitor`` replays a log (`wtwin.detect.replay`). Printed per case: the runs that page and
their first pages, judged on every point, then as ``wtwin monitor`` judges them (with
the spacing it chose and the ratio it read, `offline.smoothed.smoothing`).

    .venv/bin/python tests/bench/smoothed_logs.py [--digits]

``--digits`` adds real training logged the same way (tests/live_runs.py's digits runs,
healthy and broken, as fastai's EMA; about a minute, torch).
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from wtwin.detect.replay import alerts
from wtwin.offline.smoothed import smoothing

STEPS, SEEDS, PRESETS = 20_000, (0, 1, 2), ("pretraining", "finetuning")


def raw(seed: int, steps: int = STEPS) -> np.ndarray:
    t = np.arange(1, steps + 1)
    return 0.3 + 2.0 * (1 + t / 100) ** -0.6 + np.random.default_rng(seed).normal(0, 0.15, steps)


def ema(x: np.ndarray, beta: float = 0.98) -> np.ndarray:
    """fastai's smooth_loss: an EMA, debiased."""
    out, m = np.empty(len(x)), 0.0
    for i, v in enumerate(x.tolist()):
        m = beta * m + (1 - beta) * v
        out[i] = m / (1 - beta ** (i + 1))
    return out


def window(x: np.ndarray, w: int = 20) -> np.ndarray:
    """The mean of the last ``w`` batches."""
    c = np.cumsum(np.r_[0.0, x])
    i = np.arange(1, len(x) + 1)
    return (c[i] - c[np.maximum(i - w, 0)]) / np.minimum(i, w)


def epoch_mean(x: np.ndarray, epoch: int = 500) -> np.ndarray:
    """Keras' per-batch running mean, reset at each epoch."""
    out = np.empty(len(x))
    for e0 in range(0, len(x), epoch):
        seg = x[e0:e0 + epoch]
        out[e0:e0 + epoch] = np.cumsum(seg) / np.arange(1, len(seg) + 1)
    return out


CASES = {"raw (control)": lambda x: x, "EMA 0.98 (fastai)": ema,
         "mean of the last 20": window, "running epoch mean (Keras)": epoch_mean}


def pages(loss: np.ndarray, preset: str, every: int = 1) -> list[tuple]:
    """The pages of ``loss`` (a point a step, printed at 4 decimals) judged on one point in
    ``every`` (non-finite points and the last always), as ``wtwin monitor`` thins a log."""
    n = len(loss)
    ev = [("loss", step, round(float(v), 4), None) for step, v in enumerate(loss.tolist(), 1)
          if step % every == 0 or step == n or not math.isfinite(v)]
    return [(a.kind, a.severity, a.step) for a in alerts(ev, preset=preset)
            if a.status == "firing" and a.severity != "info"]


def main() -> int:
    t0 = time.time()
    print(f"{'log':28s} {'preset':12s} {'every point':42s} as wtwin monitor judges it")
    for name, smooth in CASES.items():
        logs = {seed: smooth(raw(seed)) for seed in SEEDS}
        found = {seed: smoothing(np.round(y, 4).tolist()) for seed, y in logs.items()}
        for preset in PRESETS:
            row = []
            for judged in (False, True):
                got = [pages(y, preset, found[seed].every if judged else 1)
                       for seed, y in logs.items()]
                paged = [g for g in got if g]
                first = "; ".join(f"{g[0][0]} at {g[0][2]}" for g in paged[:2])
                row.append(f"{len(paged)} of {len(SEEDS)}" + (f" ({first})" if first else ""))
            how = ", ".join(f"1 in {f.every} ({f.ratio:.1f})" for f in found.values())
            print(f"{name:28s} {preset:12s} {row[0]:42s} {row[1]}  [{how}]")
    if "--digits" in sys.argv[1:]:
        digits()
    print(f"\n{time.time() - t0:.0f} s")
    return 0


def digits() -> None:
    """Real training, logged smoothed: tests/live_runs.py's runs (an MLP with SGD and a CNN
    with Adam on scikit-learn's ``load_digits``, 3,000 steps, faults at step 1500), their
    loss as fastai's recorder logs it (the EMA), judged on every point and as ``wtwin
    monitor`` judges it: the first two pages, from the fault's step."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    import live_runs

    print(f"\n{'digits run, logged as an EMA':36s} {'every point':44s} as wtwin monitor judges it")
    for case in live_runs.CASES:
        y = ema(np.array([e[2] for e in live_runs.events(case)]))
        found = smoothing(np.round(y, 4).tolist())
        row = []
        for every in (1, found.every):
            got = pages(y, "pretraining", every)
            first = ", ".join(f"{k} {sev} +{step - live_runs.ONSET}" for k, sev, step in got[:2])
            row.append(f"{len(got)}" + (f" ({first})" if first else ""))
        print(f"{case.name:36s} {row[0]:44s} {row[1]}  [1 in {found.every}]")


if __name__ == "__main__":
    raise SystemExit(main())
