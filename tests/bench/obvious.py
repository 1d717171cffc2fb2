"""The figures behind the obvious-failure rules (docs/DETECTION.md, "Obvious failures").

    nice .venv/bin/python tests/bench/obvious.py

1. Blow-up: over every clean/unknown log (as is and thinned), the largest
   |loss| / (largest |loss| of the first 5 points): the `nonfinite` ``blowup`` factor
   (1000) must stand far above it.
2. Frozen data loader: the lowest ``fast - slow`` of `frozen_loader` (ln of the scatter ratio,
   while the loss falls, after the warm-up) over every clean/unknown log under the
   transforms; the threshold held out per group = the other groups' lowest less ln 8,
   and the margin each held-out group keeps. Then a real frozen loader (an MLP on
   load_digits, batch 32, Adam and SGD, 5 seeds, the same batch from step 600): its
   value 50 steps in, and the step the shipped default pages.
"""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "bench"), str(ROOT / "tests")]

from corpus import entries, transform  # noqa: E402
from detection import load  # noqa: E402

from wtwin.detect.frozen_loader import FrozenLoaderDetector  # noqa: E402

HOW = ("none", "every10th", "twice", "gap20", "resume", "x0.01", "+1000")
MARGIN = math.log(8)


def lowest(events) -> float:
    """The lowest fast - slow of a never-firing `frozen_loader` (steps that go back skipped:
    the monitor rewinds its detectors there)."""
    det, lo, last = FrozenLoaderDetector(ratio=1e-300), math.inf, -math.inf
    for ev in events:
        if ev[0] != "loss" or ev[1] < last:
            continue
        last = ev[1]
        det.observe(ev[1], ev[2])
        if det._n > det.warmup and det._lf < det._ls:
            lo = min(lo, det._fast - det._slow)
    return lo


def blowup_ratios(quiet):
    out = []
    for e in quiet:
        ev = list(load(e).events())
        for how in ("none", "every10th"):
            x = np.array([v for k, s, v, *_ in (ev if how == "none" else transform(ev, how))
                          if k == "loss"], float)
            x = x[np.isfinite(x)]
            if len(x) > 1:
                out.append((float(np.abs(x).max() / np.abs(x[:5]).max()), e.name, how))
    return sorted(out, reverse=True)


def main() -> int:
    quiet = [e for e in entries() if e.label != "anomalous"]
    r = blowup_ratios(quiet)
    print(f"blow-up: largest ratio over {len(r)} clean (log, transform) pairs: {r[0][0]:.3g} "
          f"({r[0][1]}, {r[0][2]})")
    by_group: dict[str, float] = {}
    worst = (math.inf, "")
    for e in quiet:
        ev = list(load(e).events())
        for how in HOW:
            lo = lowest(ev if how == "none" else transform(ev, how))
            by_group[e.group] = min(by_group.get(e.group, math.inf), lo)
            worst = min(worst, (lo, f"{e.name} {how}"))
    print(f"frozen_loader: lowest fast-slow on clean logs {worst[0]:.2f} (ratio {math.exp(worst[0]):.3f}, "
          f"{worst[1]})")
    margins = sorted((v - (min(w for h, w in by_group.items() if h != g) - MARGIN), g)
                     for g, v in by_group.items())
    print(f"  held out, {len(by_group)} groups: tightest margin {margins[0][0]:.2f} nats ({margins[0][1]})")
    shipped = min(by_group.values()) - MARGIN
    print(f"  shipped threshold {shipped:.2f} = ratio {math.exp(shipped):.4f}")
    frozen_runs()
    return 0


def frozen_runs() -> None:
    from test_obvious import digits_run
    for seed in range(5):
        for opt in ("adam", "sgd"):
            ev = digits_run(seed, 600, steps=700, opt=opt)
            det = FrozenLoaderDetector()
            first = next((s for _, s, v, _ in ev if det.update(s, v).active), None)
            print(f"  frozen at 600, seed {seed} {opt}: fast-slow at +50 {lowest(ev[:650]):.2f}, "
                  f"pages at {first}")


if __name__ == "__main__":
    sys.exit(main())
