"""``wtwind`` from spawn to its first 200 on /readyz with an empty store, the compiled and
the pure-Python detector builds side by side (the goal: no slower than 0.9 s on a quiet
machine, issue 18).

    .venv/bin/python tests/bench/startup.py [--repeat 5]

A real ``wtwind`` subprocess each time (reliability.py's `_start_stop`: bytecode cached,
as an installed daemon runs); the builds alternate, ``WTWIN_PURE_PYTHON=1`` for the pure
one. Reported: the median seconds to ready and the daemon's CPU seconds at ready, and the
build each daemon logged (``detector_build``). reliability.py has the same start with
1,000 runs stored.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from reliability import _start_stop, seed_runs  # noqa: E402


def logged_build(where: Path) -> str:
    for line in (where / "wtwind.log").read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "detector_build":
            return rec.get("build", str(rec.get("compiled")))
    return "(no detector_build event)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="wtwin-bench-start-"))
    db = tmp / "empty.db"
    seed_runs(db, 0)
    cached = {"PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    builds = {"pure": ({**cached, "WTWIN_PURE_PYTHON": "1"}, ("PYTHONDONTWRITEBYTECODE",)),
              "compiled": (cached, ("PYTHONDONTWRITEBYTECODE", "WTWIN_PURE_PYTHON"))}
    for name, env in builds.items():     # fills the bytecode cache
        _start_stop(tmp / f"warm-{name}", db, 0, env)
    got: dict[str, list] = {b: [] for b in builds}
    seen: dict[str, str] = {}
    for i in range(a.repeat):
        for name in (list(builds) if i % 2 == 0 else list(builds)[::-1]):
            where = tmp / f"{name}-{i}"
            total, _, cpu = _start_stop(where, db, 0, builds[name])
            got[name].append((total, cpu))
            seen[name] = logged_build(where)
    print(f"wtwind start to /readyz, empty store, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, median of {a.repeat}")
    for name, rows in got.items():
        totals = [t for t, _ in rows]
        print(f"{name:>8}: {statistics.median(totals):.2f} s to ready (all: {', '.join(f'{t:.2f}' for t in totals)}), "
              f"daemon CPU {statistics.median(c for _, c in rows):.2f} s; build logged: {seen[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
