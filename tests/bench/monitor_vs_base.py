"""The whole `RunMonitor` per loss update, now against a base commit, side by side.

    .venv/bin/python tests/bench/monitor_vs_base.py [--base e1706d8] [--steps 1100000]

The base commit's ``daemon/detectors`` is checked out of git into a temporary package
and imported next to ``wtwin.detect``; both monitors are fed the same seeded run (a
power law with noise and an lr schedule) in alternating blocks of 1,000 updates, so the
machine's load falls on both alike. Reported: mean CPU per update (refits included) in
the windows [10^3, 2 x 10^3) and [10^6, 1.1 x 10^6), and the ratio now / base.
"""

from __future__ import annotations

import argparse
import importlib
import math
import pathlib
import random
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def base_monitor(commit: str, dest: pathlib.Path):
    """``RunMonitor`` of ``commit``, as the package ``base_detectors``."""
    pkg = dest / "base_detectors"
    pkg.mkdir()
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{commit}:daemon/detectors"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for n in names:
        src = subprocess.run(["git", "show", f"{commit}:daemon/detectors/{n}"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        (pkg / n).write_text(src)
    sys.path.insert(0, str(dest))
    return importlib.import_module("base_detectors").RunMonitor


def stream(n: int, seed: int = 0):
    rng = random.Random(seed)
    for t in range(1, n + 1):
        lr = 1e-3 * min(1.0, t / 200) * (0.55 + 0.45 * math.cos(math.pi * t / n))
        yield t, 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05), lr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="e1706d8")
    ap.add_argument("--steps", type=int, default=1_100_000)
    a = ap.parse_args(argv)
    import wtwin.detect
    from wtwin.detect import RunMonitor
    print(f"wtwin.detect: {wtwin.detect.BUILD} (docs/COMPILED.md)")
    with tempfile.TemporaryDirectory() as tmp:
        Base = base_monitor(a.base, pathlib.Path(tmp))
        mons = {"now": RunMonitor("pretraining"), "base": Base("pretraining")}
        windows = {(1_000, 2_000): {}, (1_000_000, 1_100_000): {}}
        data = list(stream(a.steps))
        for i in range(0, len(data), 1_000):
            block = data[i:i + 1_000]
            for name, mon in mons.items():
                t0 = time.process_time_ns()
                for t, loss, lr in block:
                    mon.update_loss(t, loss, lr)
                dt = time.process_time_ns() - t0
                for (lo, hi), acc in windows.items():
                    if lo <= block[0][0] < hi:
                        acc[name] = acc.get(name, 0) + dt
        for (lo, hi), acc in windows.items():
            if len(acc) == 2:
                n = hi - lo
                now, base = acc["now"] / n / 1e3, acc["base"] / n / 1e3
                print(f"steps [{lo}, {hi}): now {now:.1f} us, base {a.base} {base:.1f} us, "
                      f"ratio {now / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
