"""Cost per update of the reference detector (issue 26: goal <= 1 us with one reference in
the compiled build), in the build this process loads and in the pure one.

    .venv/bin/python tests/bench/reference.py [--steps 200000] [--refs 1]

One seeded synthetic pair (a reference of ``--steps`` points, a live run 0.3 above it from
halfway, so both the judging and the behind paths are timed), losses precomputed. Each
window of 10^4 updates is timed with ``perf_counter_ns``; the median window is the steady
state (preemption on a shared machine moves only the tail). ``feed`` is the daemon's
per-update call; ``update`` also builds the verdict (a frozen dataclass). ``rebuild``: what
the daemon's look-up that finds other curves costs (daemon/references.py): ``--refs`` curves
of 2,048 points built, a tracker on them, fed 2,000 points of the run's own series (median
of 20).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

WINDOW = 10_000


def measure(steps: int, nrefs: int) -> dict:
    import wtwin.detect
    from wtwin.detect.reference import ReferenceCurve, ReferenceTracker

    rng = random.Random(0)
    xs = list(range(1, steps + 1))
    law = [2 + 3 * s ** -0.5 for s in xs]
    refs = [ReferenceCurve(f"r{k}", xs, [v + rng.gauss(0, 0.02) for v in law]) for k in range(nrefs)]
    live = [v + rng.gauss(0, 0.02) + (0.3 if s > steps // 2 else 0.0) for s, v in zip(xs, law)]
    out = {"build": "compiled" if wtwin.detect.COMPILED else "pure", "steps": steps, "refs": nrefs}
    for name in ("feed", "update"):
        tr = ReferenceTracker(refs)
        call = getattr(tr, name)
        ns = []
        for a in range(0, steps - WINDOW + 1, WINDOW):
            t0 = time.perf_counter_ns()
            for i in range(a, a + WINDOW):
                call(xs[i], live[i])
            ns.append((time.perf_counter_ns() - t0) / WINDOW)
        out[name + "_us"] = round(statistics.median(ns) / 1000, 3)
        out[name + "_state"] = tr.verdict().state
    pts = list(range(1, min(steps, 2048) + 1))
    ms = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        tr = ReferenceTracker([ReferenceCurve(f"r{k}", pts, law[:len(pts)]) for k in range(nrefs)])
        for i in range(min(steps, 2000)):
            tr.feed(xs[i], live[i])
        ms.append((time.perf_counter_ns() - t0) / 1e6)
    out["rebuild_ms"] = round(statistics.median(ms), 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--refs", type=int, default=1)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(measure(a.steps, a.refs)))
        return 0
    for pure in (False, True):
        env = dict(os.environ)
        env.pop("WTWIN_PURE_PYTHON", None)
        if pure:
            env["WTWIN_PURE_PYTHON"] = "1"
        r = subprocess.run([sys.executable, __file__, "--one", "--steps", str(a.steps),
                            "--refs", str(a.refs)], env=env, capture_output=True, text=True)
        if r.returncode:
            print(r.stderr[-2000:], file=sys.stderr)
            return 1
        m = json.loads(r.stdout)
        print(f"reference detector, {m['build']:8s} build, {m['refs']} reference(s), {m['steps']:,} "
              f"updates: feed {m['feed_us']:.3f} us, update (with its verdict) {m['update_us']:.3f} us "
              f"per update (median of {WINDOW:,}-update windows; ends {m['feed_state']}); "
              f"rebuild {m['rebuild_ms']:.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
