"""``wtwin monitor --json`` on a generated 10^6-step CSV log: the real CLI as a subprocess,
the compiled and the pure-Python detector builds side by side, and where the time goes.

    .venv/bin/python tests/bench/monitor_1m.py [--steps 1000000] [--repeat 1] [--bare]

The log: ``step,loss,val_loss,lr``, a power law with noise under a cosine schedule, an
eval every 5,000 steps, the loss climbing over the last 5% (28 MB at 10^6 steps). Per build (``WTWIN_PURE_PYTHON=1`` for the pure one),
alternating, the order flipping each repeat:

- end to end: ``wtwin monitor --json LOG`` (the console script), its wall time and CPU
  time (user + system, from ``wait4``), and its output, which must be the same for both
  builds;
- apart, in a subprocess of this script that runs the CLI's own steps
  (`offline_cli.read_log`, `analyse`, `render`): imports, read, replay (preset, the
  detectors and the alert policy over every event, caveats), output (the JSON text and
  writing it). ``--bare`` adds the bare ``RunMonitor.update_loss`` calls over the same
  events (what the replay costs without its loop around the monitor).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_core import NO_CORE, PROBE  # noqa: E402

WTWIN = Path(sys.executable).with_name("wtwin")   # the console script; else python -m
CLI = [str(WTWIN)] if WTWIN.exists() else [sys.executable, "-m", "wtwin.offline.cli"]

def write_log(path: Path, n: int, seed: int = 0) -> None:
    """A clean run up to 95% of its steps, then a loss that climbs (0.5 over the last 5%):
    the alerts both builds must agree on."""
    rng, onset = random.Random(seed), int(0.95 * n)
    with open(path, "w") as f:
        f.write("step,loss,val_loss,lr\n")
        for t in range(1, n + 1):
            lr = 1e-3 * min(1.0, t / 2000) * (0.55 + 0.45 * math.cos(math.pi * t / n))
            val = f"{2.6 + 9.0 * t ** -0.35:.6f}" if t % 5000 == 0 else ""
            climb = 10.0 * (t - onset) / n if t > onset else 0.0
            f.write(f"{t},{2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05) + climb:.6f},{val},{lr:.6g}\n")


def _env(pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "WTWIN_PURE_PYTHON"}
    if pure:
        env["WTWIN_PURE_PYTHON"] = "1"
    return env


def end_to_end(log: Path, pure: bool) -> dict:
    """The CLI as a user runs it: wall seconds, CPU seconds, its stdout."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    r = subprocess.run([*CLI, "monitor", "--json", str(log)], env=_env(pure), capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if r.returncode != 0:
        raise SystemExit(f"wtwin monitor failed ({r.returncode}): {r.stderr}")
    return {"wall": wall, "cpu": cpu, "out": r.stdout}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def phases(log: str, bare: bool) -> dict:
    """In this process: the CLI's steps one by one, wall and CPU seconds each."""
    clock = {}

    def mark(name, t0, c0):
        clock[name] = (time.perf_counter() - t0, time.process_time() - c0)
        return time.perf_counter(), time.process_time()

    t, c = time.perf_counter(), time.process_time()
    from wtwin.offline import cli as offline_cli
    import wtwin.detect as detect
    t, c = mark("imports", t, c)
    args = offline_cli.parser().parse_args(["monitor", "--json", log])
    tlog = offline_cli.read_log(args.path)
    t, c = mark("read", t, c)
    res = offline_cli.analyse(tlog, args)
    t, c = mark("replay", t, c)
    with open(os.devnull, "w") as sink:
        print(offline_cli.render(res, tlog, args), file=sink)
    t, c = mark("output", t, c)
    if bare:
        update = detect.RunMonitor(res["preset"]).update_loss
        for kind, step, value, lr, grad in tlog.events(with_grad=True):
            if kind == "loss":
                update(step, value, lr, grad)
        mark("bare update_loss", t, c)
    return {"compiled": getattr(detect, "COMPILED", False), "build": getattr(detect, "BUILD", NO_CORE),
            "phases": clock}


def run_phases(log: Path, pure: bool, bare: bool) -> dict:
    r = subprocess.run([sys.executable, __file__, "--phases", str(log), *(["--bare"] if bare else [])],
                       env=_env(pure), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"phases failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--bare", action="store_true", help="also time the bare update_loss calls")
    ap.add_argument("--phases", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.phases:
        print(json.dumps(phases(a.phases, a.bare)))
        return 0
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.csv"
        write_log(log, a.steps)
        print(f"log: {a.steps:,} steps, {log.stat().st_size / 2 ** 20:.1f} MiB; `wtwin monitor --json`")
        probe = run_phases_probe()
        builds = ["pure", "compiled"] if probe[0] else ["pure"]
        print(f"compiled build: {probe[1]}")
        if not probe[0]:
            print("THE COMPILED BUILD IS NOT AVAILABLE: only the pure-Python side is timed below.")
        e2e = {b: [] for b in builds}
        split = {b: [] for b in builds}
        for i in range(a.repeat):
            for b in (builds if i % 2 == 0 else builds[::-1]):
                e2e[b].append(end_to_end(log, b == "pure"))
                split[b].append(run_phases(log, b == "pure", a.bare))
        report(e2e, split, builds)
    return 0


def run_phases_probe() -> tuple[bool, str]:
    r = subprocess.run([sys.executable, "-c", PROBE],
                       env=_env(False), capture_output=True, text=True, check=True)
    return tuple(json.loads(r.stdout))


def report(e2e: dict, split: dict, builds: list[str]) -> None:
    med = statistics.median
    outs = {r["out"] for rs in e2e.values() for r in rs}
    alerts = [(a["step"], a["kind"], a["severity"]) for a in json.loads(next(iter(outs)))["alerts"]]
    print(f"same output from every run and build: {'yes' if len(outs) == 1 else 'NO'}; alerts: {alerts}")
    print("| | " + " | ".join(f"{b} wall s | {b} CPU s" for b in builds)
          + (" | ratio wall compiled/pure |" if len(builds) == 2 else " |"))
    print("|---|" + "---|---|" * len(builds) + ("---|" if len(builds) == 2 else ""))

    def line(label, vals):
        cells = " | ".join(f"{w:.2f} | {c:.2f}" for w, c in vals)
        ratio = f" | {vals[1][0] / vals[0][0]:.2f} |" if len(vals) == 2 and vals[0][0] > 0 else " |"
        print(f"| {label} | {cells}{ratio}")

    line("end to end (`wtwin monitor --json`)",
         [(med(r["wall"] for r in e2e[b]), med(r["cpu"] for r in e2e[b])) for b in builds])
    for name in split[builds[0]][0]["phases"]:
        line(f"- {name}", [(med(r["phases"][name][0] for r in split[b]),
                            med(r["phases"][name][1] for r in split[b])) for b in builds])


if __name__ == "__main__":
    sys.exit(main())
