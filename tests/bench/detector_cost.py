"""Per-update cost of the forecast detector and of the whole monitor, at step 10^3 and 10^6.

    .venv/bin/python tests/bench/detector_cost.py [--steps 1100000]

One seeded synthetic run per subject, timed call by call (perf_counter_ns). For the
windows [10^3, 2*10^3) and [10^6, 1.1*10^6) of the *same* run it prints the median
per-update cost (the steady state, no refit) and the mean (refits amortized in). The
10^6 window spans one full refit period (refit_ratio 1.1), so its mean includes a refit.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time

import numpy as np

from wtwin.daemon.detectors import RunMonitor
from wtwin.daemon.detectors.forecast import ForecastDetector


def timed(update, n: int, seed: int = 0) -> np.ndarray:
    rng = random.Random(seed)
    out = np.empty(n + 1)
    clock = time.perf_counter_ns
    for t in range(1, n + 1):
        loss = 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05)
        t0 = clock()
        update(t, loss)
        out[t] = clock() - t0
    return out / 1000.0   # microseconds


def windows(us: np.ndarray, n: int):
    for lo, hi in ((10 ** 3, 2 * 10 ** 3), (10 ** 6, int(1.1 * 10 ** 6))):
        if hi <= n + 1:
            w = us[lo:hi]
            yield lo, hi, float(np.median(w)), float(np.mean(w)), float(np.percentile(w, 99.9))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_100_000)
    a = ap.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| subject | window (steps) | median us/update | mean us/update (refits amortized) | p99.9 us |")
    print("|---|---|---|---|---|")
    subjects = {"forecast detector": lambda: ForecastDetector().update,
                "RunMonitor.update_loss (all detectors)": lambda: RunMonitor("pretraining").update_loss}
    for name, make in subjects.items():
        us = timed(make(), a.steps)
        for lo, hi, med, mean, p999 in windows(us, a.steps):
            print(f"| {name} | [{lo:.0e}, {hi:.1e}) | {med:.1f} | {mean:.1f} | {p999:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
