"""Per-update cost of every detector and of the whole monitor, at step 10^3 and 10^6.

    .venv/bin/python tests/bench/detector_cost.py [--steps 1100000] [--only forecast,monitor]

The ``forecast detector, lr ...`` subjects send a learning rate too (a cosine over the
run with 200 warm-up steps, the loss from Tissue et al.'s law over it), once per
schedule-aware law (``schedule``, ``mpl``) and for ``auto`` (which fits ``schedule``
here, no restart, but keeps the multi-power buckets in case of one).

One seeded synthetic run per subject (losses precomputed). Each call is timed with
``perf_counter_ns`` (its median is the steady state: preemption by the neighbours of a
shared machine only moves the tail), and the CPU time of the process
(``process_time_ns``) is read at the window edges only, so the mean CPU time per update
includes every refit in the window and no timer overhead. Windows: [10^3, 2*10^3) and
[10^6, 1.1*10^6) of the *same* run. Refits are geometric (every 1.15x in step), so the
second window may hold no refit; amortized, one refit there costs its CPU time divided by
~1.5*10^5 updates.
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import sys
import time

import numpy as np

from wtwin.detect import RunMonitor
from wtwin.detect.base import REGISTRY
from wtwin.detect.presets import PRESET_PARAMS


def _detector(name: str):
    """``update(step, loss)`` of one detector with its `pretraining` preset arguments."""
    det = REGISTRY[name](**PRESET_PARAMS["pretraining"].get(name, {}))
    if name == "plateau":       # it reads the forecast: give it the noise-free curve
        return lambda t, loss: det.update(t, loss, 2.6 + 9.0 * t ** -0.35, False)
    if name == "overfit":       # per loss event it only tracks the training loss
        return det.update_train
    return det.update


def _lr_run(law: str):
    """``update(t, loss, lr)`` of the forecast detector with a schedule-aware law."""
    return REGISTRY["forecast"](**{**PRESET_PARAMS["pretraining"].get("forecast", {}), "law": law}).update


def cosine_lrs(n: int, peak: float = 1e-3, warm: int = 200) -> list[float]:
    return [peak * t / warm if t < warm else
            peak * (0.5 * (1 + math.cos(math.pi * (t - warm) / (n - warm))) + 0.01)
            for t in range(1, n + 1)]


def timed(update, n: int, seed: int = 0, lr: bool = False, places: int | None = None):
    """``places``: the losses as a log prints them, rounded to that many decimals (None:
    raw floats, as an emitter sends them)."""
    rng = random.Random(seed)
    if lr:                      # Tissue et al.'s law over a cosine schedule
        lrs, losses, s1, s2, mom, prev = cosine_lrs(n), [], 0.0, 0.0, 0.0, None
        for e in lrs:
            mom = mom * 0.999 + ((prev if prev is not None else e) - e)
            s1, s2, prev = s1 + e, s2 + mom, e
            losses.append(2.6 + 1.5 * (s1 + 0.05) ** -0.35 - 0.5 * s2 + rng.gauss(0, 0.05))
    else:
        losses = [2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05) for t in range(1, n + 1)]
    if places is not None:
        losses = [round(v, places) for v in losses]
    edges = {10 ** 3, 2 * 10 ** 3, 10 ** 6, int(1.1 * 10 ** 6)}
    wall, cpu = np.empty(n + 1), {}
    clock, cpu_clock = time.perf_counter_ns, time.process_time_ns
    for t in range(1, n + 1):
        if t in edges:
            cpu[t] = cpu_clock()
        loss = losses[t - 1]
        if lr:
            e = lrs[t - 1]
            t0 = clock()
            update(t, loss, e)
        else:
            t0 = clock()
            update(t, loss)
        wall[t] = clock() - t0
    return wall / 1000.0, cpu


def windows(us: np.ndarray, cpu: dict, n: int):
    for lo, hi in ((10 ** 3, 2 * 10 ** 3), (10 ** 6, int(1.1 * 10 ** 6))):
        if hi <= n:
            w = us[lo:hi]
            mean_cpu = (cpu[hi] - cpu[lo]) / 1000.0 / (hi - lo)
            yield lo, hi, float(np.median(w)), mean_cpu, float(np.percentile(w, 99.9))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_100_001)
    ap.add_argument("--only", default="", help="comma-separated subjects (substring match)")
    a = ap.parse_args(argv)
    import os
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          "median: wall time per call; mean: CPU time per update over the window")
    import wtwin.detect
    print(f"wtwin.detect: {wtwin.detect.BUILD} (docs/COMPILED.md)")
    print("| subject | window (steps) | median us/update | mean CPU us/update (refits amortized) | p99.9 wall us |")
    print("|---|---|---|---|---|")
    subjects = {f"{name} detector": (lambda name=name: _detector(name))
                for name in ("forecast", "spike", "divergence", "rise", "plateau", "resume_jump",
                             "nonfinite", "overfit")}
    subjects["RunMonitor.update_loss (all detectors)"] = lambda: RunMonitor("pretraining").update_loss
    for law in ("schedule", "mpl", "auto"):
        subjects[f"forecast detector, lr cosine, law={law}"] = (lambda law=law: (_lr_run(law), True))
    if a.only:
        keep = a.only.split(",")
        subjects = {k: v for k, v in subjects.items() if any(w in k.lower() for w in keep)}
    for name, make in subjects.items():
        made = make()
        update, lr = made if isinstance(made, tuple) else (made, False)
        us, cpu = timed(update, a.steps, lr=lr)
        for lo, hi, med, mean, p999 in windows(us, cpu, a.steps):
            print(f"| {name} | [{lo:.0e}, {hi:.1e}) | {med:.1f} | {mean:.1f} | {p999:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
