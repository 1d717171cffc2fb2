"""The compiled `RunMonitor.update_loss` of this tree against other checkouts', alternating.

    .venv/bin/python tests/bench/compiled_vs_base.py BASE_DIR [MORE_DIRS...] [--rounds 3] [--printed]

Each directory is a checkout compiled in place (``python setup.py build_ext --inplace``
run inside it; ``git worktree add --detach DIR COMMIT`` makes one). Every round runs
``tests/bench/compiled_core.py --worker`` once per tree, the trees in turn (this one
last), each in its own process with that tree's package first on ``PYTHONPATH`` (a
temporary ``wtwin`` folder linking its ``detect``, ``daemon``, ``emitters`` and
``sinks``), so the machine's load falls on all alike. Each tree's own ``compiled_core.py``
times it: the same seeded run and windows as `detector_cost`; with ``--printed``, this
tree's times every tree on that run printed at 6 decimals, as a log prints it. Printed: per round and
tree, the median wall time per call and the mean CPU per update (refits amortized) in
[10^3, 2x10^3) and [10^6, 1.1x10^6); then the medians over the rounds and this tree's
ratio to the first directory's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
SUBJECT = "RunMonitor.update_loss (all detectors)"
PRINTED = "RunMonitor.update_loss (all detectors), the loss printed at 6 decimals"
PARTS = ("compiled", "detect", "daemon", "emitters", "offline", "sinks")


def package(tree: Path, tmp: Path) -> str:
    """A folder whose ``wtwin`` is ``tree``'s package (for ``PYTHONPATH``)."""
    pkg = tmp / tree.name / "wtwin"
    pkg.mkdir(parents=True)
    for part in PARTS:
        (pkg / part).symlink_to(tree / part)
    return str(pkg.parent)


def run(tree: Path, path: str | None, printed: bool = False) -> dict:
    """One timing of ``tree``'s package: by its own compiled_core.py, or, ``printed``, by
    this tree's (the run printed at 6 decimals, a subject older trees do not have)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WTWIN_PURE_PYTHON", "PYTHONPATH")}
    if path:
        env["PYTHONPATH"] = path
    script = (HERE if printed else tree) / "tests" / "bench" / "compiled_core.py"
    r = subprocess.run([sys.executable, str(script), "--worker", PRINTED if printed else SUBJECT],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {r.stderr}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if not out["compiled"]:
        raise SystemExit(f"{tree} is not compiled ({out['build']}): build it in place first")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bases", nargs="+", type=Path, help="checkouts compiled in place")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--printed", action="store_true",
                    help="the run as a log prints it, at 6 decimals (as wtwin monitor reads one)")
    a = ap.parse_args(argv)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        trees = [(b.resolve().name, b.resolve(), package(b.resolve(), Path(tmp))) for b in a.bases]
        trees.append(("this tree", HERE, None))
        got = {name: [] for name, _, _ in trees}
        for r in range(a.rounds):
            for name, tree, path in trees:
                w = run(tree, path, a.printed)["windows"]
                got[name].append(w)
                print(f"round {r + 1} {name}: " + "; ".join(
                    f"[{lo:.0e}, {hi:.1e}) median {m:.3f} us, CPU {c:.3f} us" for lo, hi, m, c, _ in w))
    print(f"\nmedians over {a.rounds} rounds (us: median per call / mean CPU per update)")
    first = trees[0][0]
    for k in range(len(got[first][0])):
        lo, hi = got[first][0][k][:2]
        cells = {n: (statistics.median(w[k][2] for w in ws), statistics.median(w[k][3] for w in ws))
                 for n, ws in got.items()}
        row = ", ".join(f"{n} {m:.3f} / {c:.3f}" for n, (m, c) in cells.items())
        m0, c0 = cells[first]
        m1, c1 = cells["this tree"]
        print(f"[{lo:.0e}, {hi:.1e}): {row}; this tree / {first}: {m1 / m0:.2f} / {c1 / c0:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
