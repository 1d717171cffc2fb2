"""What compiling the detectors would buy: the same code under CPython and under Cython.

The ingest goal of issue 2 (half the raw pyzmq+msgpack rate) leaves the daemon about
20 us per event; the detectors alone take 30-40 (tests/bench/ingest.py). This probe
measures the two ways to compile them without a rewrite, side by side in one run:

- **as is**: every module of ``detect`` cythonized unchanged (a copy, in a
  temporary folder), timed through ``RunMonitor.update_loss``;
- **typed**: ``rise`` with an augmenting ``.pxd`` that types its attributes and locals
  (the ones that may hold ``None`` stay objects), timed through ``RiseDetector.update``.

Each variant runs in its own fresh process, interleaved, best of ``--repeats``.
Needs Cython and a C compiler (``pip install cython``); says so and exits 0 without them.

    .venv/bin/python tests/bench/compile_probe.py [--events 40000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Types for rise.py, attribute by attribute (objects where the code stores None).
RISE_PXD = """
import cython
from .base cimport Detector

cdef class RiseDetector(Detector):
    cdef public double threshold, halflife, noise_halflife, clip, level_z, jump_k, jump_h, jump_clip
    cdef public long patience, warmup
    cdef public double _c_noise, _c_level, _c_w
    cdef public object _c_dt
    cdef public double _dt, _S, _score, _noise, _best
    cdef public object _level, _first, _last, _since, _prev
    cdef public long _points

    @cython.locals(dt=cython.double, d=cython.double, noise=cython.double, cn=cython.double,
                   h=cython.double, g=cython.double, sd=cython.double, r=cython.double,
                   c=cython.double, level=cython.double, best=cython.double, a=cython.double,
                   score=cython.double, jump=cython.double, S=cython.double)
    cpdef update(self, step, double loss)
"""

TIMER = r"""
import sys, time, random
sys.path.insert(0, {bench!r})
import msgpack
from ingest import _frames
from wtwin.detect import RunMonitor
from wtwin.detect.rise import RiseDetector
n = {n}
evs = [msgpack.unpackb(f) for f in _frames("probe", n, 1)]
rng = random.Random(1)
xs = [(t, 3 + 5 * t ** -0.5 + rng.gauss(0, 0.1)) for t in range(1, n + 1)]
t0 = time.process_time()
m = RunMonitor("pretraining")
for e in evs:
    ms = m.update_loss(e["step"], e["loss"], e.get("lr"), e.get("grad_norm"))
mon = time.process_time() - t0
d = RiseDetector()
u = d.update
t0 = time.process_time()
for t, x in xs:
    last = u(t, x)
rise = time.process_time() - t0
print(mon / n * 1e6, rise / n * 1e6, repr(last), repr(ms))
"""


def _package(dest: Path) -> Path:
    """A copy of the package as ``dest/wtwin`` (the layout an install makes)."""
    pkg = dest / "wtwin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("detect", "daemon", "emitters", "sinks"):
        shutil.copytree(ROOT / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__"))
    return pkg / "detect"


def _cythonize(folder: Path, modules: list[str], extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "Cython.Build.Cythonize", "-3", "-i", "-q", *extra, *modules]
    subprocess.run(cmd, cwd=folder, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _typed_rise(folder: Path) -> None:
    """rise.py as a cdef class: a .pxd beside it, its base a cdef class too; Cython does not
    allow a decorator on a cdef class, so ``@register`` becomes a call after it."""
    (folder / "base.pxd").write_text("cdef class Detector:\n    pass\n")
    (folder / "rise.pxd").write_text(RISE_PXD)
    src = (folder / "rise.py").read_text()
    src = src.replace("@register\nclass RiseDetector", "class RiseDetector")
    (folder / "rise.py").write_text(src + "\n\nregister(RiseDetector)\n")
    _cythonize(folder, ["base.py", "rise.py"], ["-X", "annotation_typing=False"])


def _time(path: Path | None, n: int) -> tuple[float, float, str]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    code = TIMER.format(bench=str(Path(__file__).parent), n=n)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tempfile.gettempdir(),
                         capture_output=True, text=True).stdout.split(" ", 2)
    return float(out[0]), float(out[1]), out[2].strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=40_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if importlib.util.find_spec("Cython") is None or shutil.which("cc") is None:
        print("compile_probe: skipped (needs Cython and a C compiler: pip install cython)")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="wtwin-compile-"))
    as_is, typed = tmp / "as_is", tmp / "typed"
    folder = _package(as_is)
    _cythonize(folder, sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py"), [])
    _typed_rise(_package(typed))
    variants = {"python": None, "cython as is": as_is, "cython, rise typed": typed}
    best: dict[str, list[float]] = {k: [float("inf")] * 2 for k in variants}
    states = {}
    for _ in range(args.repeats):
        for name, path in variants.items():
            mon, rise, state = _time(path, args.events)
            best[name] = [min(best[name][0], mon), min(best[name][1], rise)]
            states[name] = state
    same = len(set(states.values())) == 1
    print(f"compile_probe: {args.events} events, best of {args.repeats}, CPU us per update")
    print(f"{'variant':<22}{'RunMonitor':>12}{'x':>7}{'rise':>10}{'x':>7}")
    py = best["python"]
    for name, (mon, rise) in best.items():
        print(f"{name:<22}{mon:>12.2f}{py[0] / mon:>7.2f}{rise:>10.2f}{py[1] / rise:>7.2f}")
    print(f"final states identical across variants: {same}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
