"""The two schedule-aware laws side by side: ``law="schedule"`` (Tissue et al. 2024) and
``law="mpl"`` (Luo et al. 2025), and ``law="auto"`` (``schedule``, ``mpl`` once the LR
has come back up: a warm restart), on synthetic curves with lr sent.

    .venv/bin/python tests/bench/schedule_laws.py [--seeds 5] [--n 12000]

Curves (tests/lr_curves.py): each law's own form as the truth, under WSD, cosine,
step-decay and warm-restart schedules, Gaussian noise 0.03. Per (truth, schedule, law):

- ``err``: RMS of the forecast minus the noise-free curve over the last quarter of the
  run (the warm-downs, the last step, the last cycle), in noise units; ``bias``: its mean
  (positive: the forecast sits above the curve, the safe side for a one-sided test);
- ``FA``: clean runs with an alarm, of ``seeds``;
- ``hit``: runs with a linear ramp from 2/3 of the run (3.3 noise units 1000 steps
  later) caught, of ``seeds``; ``delay``: median steps from the onset;
- ``us``: mean CPU per update (refits included).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lr_curves as lc  # noqa: E402
from wtwin.detect.forecast import ForecastDetector  # noqa: E402

LAWS = ("schedule", "mpl", "auto")


def run(law, eta, clean, y, onset=None):
    det, hit, pred = ForecastDetector(law=law), None, np.full(len(y), np.nan)
    t0 = time.process_time()
    for t, (e, v) in enumerate(zip(eta.tolist(), y.tolist()), 1):
        s = det.update(t, v, e)
        if s.l_pred is not None:
            pred[t - 1] = s.l_pred
        if s.alert and hit is None:
            hit = t
    us = (time.process_time() - t0) / len(y) * 1e6
    return hit, pred, us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--n", type=int, default=12000)
    a = ap.parse_args(argv)
    n, noise = a.n, 0.03
    onset = 2 * n // 3
    ramp = 1e-4 * np.maximum(np.arange(1, n + 1) - onset, 0)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{a.seeds} seeds, {n} steps, noise {noise}, ramp onset {onset}")
    print("| truth | schedule | law | err (noise units) | bias | FA | hit | delay (median) | us/update |")
    print("|---|---|---|---|---|---|---|---|---|")
    total = {law: {"fa": 0, "hit": 0, "delays": [], "err": [], "runs": 0} for law in LAWS}
    for truth in ("mpl", "tissue"):
        for kind in lc.KINDS:
            rows = {law: {"err": [], "bias": [], "fa": 0, "hit": 0, "delays": [], "us": []} for law in LAWS}
            for seed in range(a.seeds):
                eta, clean, y = lc.curve(truth, kind, n=n, noise=noise, seed=seed)
                last = slice(3 * n // 4, n)
                for law in LAWS:
                    r = rows[law]
                    hit, pred, us = run(law, eta, clean, y)
                    d = (pred[last] - clean[last]) / noise
                    r["err"].append(float(np.sqrt(np.nanmean(d * d))))
                    r["bias"].append(float(np.nanmean(d)))
                    r["fa"] += hit is not None
                    r["us"].append(us)
                    hit, _, us = run(law, eta, clean, y + ramp)
                    if hit is not None and hit > onset:
                        r["hit"] += 1
                        r["delays"].append(hit - onset)
                    r["us"].append(us)
            for law in LAWS:
                r, tt = rows[law], total[law]
                dl = f"{np.median(r['delays']):.0f}" if r["delays"] else "-"
                print(f"| {truth} | {kind} | {law} | {np.mean(r['err']):.2f} | {np.mean(r['bias']):+.2f} | "
                      f"{r['fa']}/{a.seeds} | {r['hit']}/{a.seeds} | {dl} | {np.mean(r['us']):.0f} |")
                tt["fa"] += r["fa"]
                tt["hit"] += r["hit"]
                tt["delays"] += r["delays"]
                tt["err"] += r["err"]
                tt["runs"] += a.seeds
                sys.stdout.flush()
    for law in LAWS:
        tt = total[law]
        print(f"| all | all | {law} | {np.mean(tt['err']):.2f} | | {tt['fa']}/{tt['runs']} | "
              f"{tt['hit']}/{tt['runs']} | {np.median(tt['delays']):.0f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
