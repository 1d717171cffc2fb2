"""The compiled detector core against the pure-Python build, per detector and for the
whole `RunMonitor.update_loss`, at 10^3 and 10^6 steps, side by side in one run.

    .venv/bin/python tests/bench/compiled_core.py [--steps 1100001] [--only spike,monitor] [--repeat 1]

The subjects, the seeded runs and the windows are tests/bench/detector_cost.py's. Each
detector is timed through ``update()`` (the public call, a state tuple per update) and,
where it has one, ``observe()`` (what `RunMonitor` calls: no state object). Every
(subject, build) runs in its own subprocess, the pure one with ``WTWIN_PURE_PYTHON=1``;
the two builds alternate subject by subject (and their order flips each repeat), so the
neighbours' load falls on both alike. Reported per window: the median wall time per call,
the mean CPU time per update (refits amortized), and the ratio compiled / pure of each.

Where the compiled build is not installed (``wtwin.detect.COMPILED`` false without
``WTWIN_PURE_PYTHON``), it says so, with ``wtwin.detect.BUILD``, and times the pure side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DETECTORS = ("forecast", "spike", "divergence", "rise", "plateau", "resume_jump", "nonfinite", "overfit",
             "effect")
OBSERVED = ("forecast", "spike", "divergence", "rise", "plateau", "resume_jump", "nonfinite", "effect")
MONITOR = "RunMonitor.update_loss (all detectors)"
# the same run as a log prints it (wtwin monitor's case: the detectors that read the print
# resolution ask it per point; an emitter's raw floats settle it at once)
PRINTED = "RunMonitor.update_loss (all detectors), the loss printed at 6 decimals"
HARNESS = "harness alone (a no-op call)"

# a tree without the compiled core (before issue 18) has no COMPILED/BUILD: the pure build
NO_CORE = "pure Python (this tree has no compiled core)"
PROBE = ("import json, wtwin.detect as d; "
         f"print(json.dumps([getattr(d, 'COMPILED', False), getattr(d, 'BUILD', {NO_CORE!r})]))")


def subjects() -> list[str]:
    out = [HARNESS]
    out += [f"{name} detector" for name in DETECTORS]
    out += [f"{name} detector, {'feed' if name == 'effect' else 'observe'}()" for name in OBSERVED]
    out += [MONITOR, PRINTED]
    out += [f"forecast detector, lr cosine, law={law}" for law in ("schedule", "mpl", "auto")]
    return out


def _observer(name: str):
    """detector_cost's subject ``name``, through ``observe()`` (the effect detector's
    ``feed()``, as the monitor calls it); None where the build has none. Overfit has no
    row: per loss event it only tracks the training loss (``update_train``, above)."""
    from wtwin.detect.base import REGISTRY
    from wtwin.detect.presets import PRESET_PARAMS

    det = REGISTRY[name](**PRESET_PARAMS["pretraining"].get(name, {}))
    obs = getattr(det, "feed" if name == "effect" else "observe", None)
    if obs is not None and name == "plateau":
        return lambda t, loss: obs(t, loss, 2.6 + 9.0 * t ** -0.35, False)
    if obs is not None and name == "effect":      # not judging, the noise-free forecast, no lr
        return lambda t, loss: obs(t, loss, False, 2.6 + 9.0 * t ** -0.35, None)
    return obs


def worker(subject: str, steps: int) -> dict:
    """Time one subject in this process (one build): detector_cost's `timed` and `windows`."""
    sys.path.insert(0, str(HERE))
    import detector_cost as dc

    import wtwin.detect as detect

    lr, places = False, None
    if subject == HARNESS:
        update = (lambda t, loss: None)
    elif subject in (MONITOR, PRINTED):
        update = detect.RunMonitor("pretraining").update_loss
        places = 6 if subject == PRINTED else None
    elif ", lr cosine, law=" in subject:
        update, lr = dc._lr_run(subject.rsplit("=", 1)[1]), True
    elif subject.endswith((", observe()", ", feed()")):
        update = _observer(subject.split(" detector")[0])
    else:
        update = dc._detector(subject.split(" detector")[0])
    out = {"compiled": getattr(detect, "COMPILED", False), "build": getattr(detect, "BUILD", NO_CORE),
           "windows": []}
    if update is None:
        out["missing"] = "no observe() in this build"
        return out
    us, cpu = dc.timed(update, steps, lr=lr, places=places)
    out["windows"] = [list(w) for w in dc.windows(us, cpu, steps)]
    return out


def run(subject: str, steps: int, pure: bool) -> dict:
    env = dict(os.environ)
    env.pop("WTWIN_PURE_PYTHON", None)
    if pure:
        env["WTWIN_PURE_PYTHON"] = "1"
    r = subprocess.run([sys.executable, __file__, "--worker", subject, "--steps", str(steps)],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{subject} ({'pure' if pure else 'compiled'}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def probe() -> tuple[bool, str]:
    env = {k: v for k, v in os.environ.items() if k != "WTWIN_PURE_PYTHON"}
    r = subprocess.run([sys.executable, "-c", PROBE],
                       env=env, capture_output=True, text=True, check=True)
    compiled, build = json.loads(r.stdout)
    return compiled, build


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_100_001)
    ap.add_argument("--only", default="", help="comma-separated subjects (substring match)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per (subject, build); medians")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a.steps)))
        return 0
    compiled, build = probe()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"compiled build: {build}")
    if not compiled:
        print("THE COMPILED BUILD IS NOT AVAILABLE: only the pure-Python side is timed below.")
    names = subjects()
    if a.only:
        keep = a.only.lower().split(",")
        names = [n for n in names if any(w in n.lower() for w in keep)]
    builds = ["pure", "compiled"] if compiled else ["pure"]
    print("median: wall time per call (us); CPU: mean CPU time per update over the window (us), "
          "refits amortized; ratio: compiled / pure (below 1: the compiled build is faster)")
    print("| subject | window (steps) | pure median | compiled median | ratio | pure CPU | compiled CPU | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        got = {b: [] for b in builds}
        for i in range(a.repeat):
            for b in (builds if i % 2 == 0 else builds[::-1]):
                got[b].append(run(name, a.steps, pure=b == "pure"))
        _row(name, got)
        sys.stdout.flush()
    return 0


def _row(name: str, got: dict) -> None:
    if any(r.get("missing") for rs in got.values() for r in rs):
        print(f"| {name} | - | {got['pure'][0].get('missing', '')} | | | | | |")
        return
    for k, (lo, hi, *_) in enumerate(got["pure"][0]["windows"]):
        med = {b: statistics.median(r["windows"][k][2] for r in rs) for b, rs in got.items()}
        cpu = {b: statistics.median(r["windows"][k][3] for r in rs) for b, rs in got.items()}
        c_med, c_cpu = med.get("compiled"), cpu.get("compiled")
        ratio = (lambda c, p: f"{c / p:.2f}" if c is not None and p > 0 else "-")
        cell = (lambda v: "-" if v is None else f"{v:.2f}")
        print(f"| {name} | [{lo:.0e}, {hi:.1e}) | {med['pure']:.2f} | {cell(c_med)} | "
              f"{ratio(c_med, med['pure'])} | {cpu['pure']:.2f} | {cell(c_cpu)} | {ratio(c_cpu, cpu['pure'])} |")


if __name__ == "__main__":
    sys.exit(main())
