"""What ``wtwin monitor`` spends around the detectors, now against a base commit, side by
side: reading a 10^6-step CSV (`read_log`) and the replay loop (`offline_cli.monitor_log`).

    .venv/bin/python tests/bench/offline_vs_base.py [--base 912ab1f] [--steps 1000000] [--repeat 3] [--jsonl]

The base commit's tree is exported with ``git archive`` into a temporary folder and
imported as ``wtwin`` from there (``PYTHONPATH``), this tree as installed; each side in
its own subprocess, alternating, the pure-Python build on both (``WTWIN_PURE_PYTHON=1``).
For the loop alone, `RunMonitor.update_loss`/`update_eval` are replaced, in that
subprocess only, by a function returning one fixed state: what is left is the code around
the detectors (events, session, alert policy, results). The detectors themselves are
tests/bench/compiled_core.py's; the whole CLI is monitor_1m.py's. CPU seconds, medians.
``--jsonl``: the same run as JSON lines (``{"step": .., "loss": .., "lr": ..}``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from monitor_1m import write_log  # noqa: E402

WORKER = r"""
import json, sys, time
from wtwin.offline.logs import read_log
from wtwin.offline import cli as offline_cli
from wtwin.detect import RunMonitor
from wtwin.detect.finding import MonitorState

clock = time.process_time
t = clock(); log = read_log(sys.argv[1]); read = clock() - t
fixed = MonitorState(1, 2.0, 2.0, 1.9, 2.1, 0.0, 0.0, 0.0, 1.0, False, ())
RunMonitor.update_loss = lambda self, step, loss, lr=None, grad_norm=None: fixed
RunMonitor.update_eval = lambda self, step, metrics: fixed
t = clock(); offline_cli.monitor_log(log); loop = clock() - t
print(json.dumps({"read": read, "loop": loop, "from": offline_cli.__file__}))
"""


def to_jsonl(path: Path) -> Path:
    out = path.with_suffix(".jsonl")
    with open(path) as src, open(out, "w") as dst:
        for row in csv.DictReader(src):
            dst.write(json.dumps({k: float(v) if k != "step" else int(v) for k, v in row.items() if v}) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="912ab1f")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jsonl", action="store_true", help="the log as JSON lines")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "base" / "wtwin"
        pkg.mkdir(parents=True)
        tar = subprocess.run(["git", "archive", a.base], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(pkg)], input=tar, check=True)
        log = Path(tmp) / "run.csv"
        write_log(log, a.steps)
        if a.jsonl:
            log = to_jsonl(log)
        sides = {f"base {a.base}": {"PYTHONPATH": str(pkg.parent)}, "now": {}}
        got: dict[str, list] = {s: [] for s in sides}
        for i in range(a.repeat):
            for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
                env = {**os.environ, "WTWIN_PURE_PYTHON": "1", **sides[name]}
                r = subprocess.run([sys.executable, "-c", WORKER, str(log)], env=env,
                                   capture_output=True, text=True, check=True)
                got[name].append(json.loads(r.stdout))
        assert all(r["from"].startswith(str(pkg)) for r in got[f"base {a.base}"]), "base not imported"
        print(f"{a.steps:,}-step {'JSONL' if a.jsonl else 'CSV'}, CPU seconds, median of {a.repeat}, load {os.getloadavg()[0]:.1f}")
        med = {s: {k: statistics.median(r[k] for r in rs) for k in ("read", "loop")} for s, rs in got.items()}
        base, now = med[f"base {a.base}"], med["now"]
        for k, label in (("read", "read_log"), ("loop", "replay loop around the detectors")):
            print(f"{label}: now {now[k]:.2f} s, base {a.base} {base[k]:.2f} s, ratio {now[k] / base[k]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
