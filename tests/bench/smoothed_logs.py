"""Healthy runs whose log prints a smoothed loss: how many page. A known limit, measured.

Many trainers print a loss that is already smoothed: fastai's recorder keeps an EMA
(beta 0.98), a Keras callback's per-batch ``logs["loss"]`` is the running mean since the
epoch began, a progress bar shows the mean of the last 20 batches. The detectors' noise
models read the scatter from one point to the next; in a smoothed log that scatter is a
few hundredths of the batch noise, while the level still wanders as much as in the raw
log. The significance tests then pass a wander the size of the gate, and the gate alone
(1% of the progress) does not hold it.

Each case is the same healthy run (a loss ``0.3 + 2 (1 + t/100)^-0.6`` with a batch noise
of 0.15, 20,000 steps, one point a step, 4 decimals), logged raw (the control) or
smoothed, three seeds, under ``pretraining`` and ``finetuning``, replayed as ``wtwin
monitor`` replays a log (`wtwin.detect.replay`). Printed per case: the runs that page and
their first pages.

    .venv/bin/python tests/bench/smoothed_logs.py
"""

from __future__ import annotations

import time

import numpy as np

from wtwin.detect.replay import alerts

STEPS, SEEDS, PRESETS = 20_000, (0, 1, 2), ("pretraining", "finetuning")


def raw(seed: int) -> np.ndarray:
    t = np.arange(1, STEPS + 1)
    return 0.3 + 2.0 * (1 + t / 100) ** -0.6 + np.random.default_rng(seed).normal(0, 0.15, STEPS)


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


def pages(loss: np.ndarray, preset: str) -> list[tuple]:
    ev = [("loss", step, round(float(v), 4), None) for step, v in enumerate(loss.tolist(), 1)]
    return [(a.kind, a.severity, a.step) for a in alerts(ev, preset=preset)
            if a.status == "firing" and a.severity != "info"]


def main() -> int:
    t0 = time.time()
    print(f"{'log':28s} {'preset':12s} paged  first pages")
    for name, smooth in CASES.items():
        for preset in PRESETS:
            got = {seed: pages(smooth(raw(seed)), preset) for seed in SEEDS}
            paged = [g for g in got.values() if g]
            first = "; ".join(f"{g[0][0]} {g[0][1]} at {g[0][2]}" for g in paged)
            print(f"{name:28s} {preset:12s} {len(paged)} of {len(SEEDS)}  {first}")
    print(f"\n{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
