"""What each module of the compiled core costs to compile: Cython's C generation and the C
compiler's run, in CPU seconds, with the interpreter's own flags (``-g -O3``: setuptools'
default) and with ``-g0`` (no debug info: what setup.py builds), and the size of the
extension each gives.

    .venv/bin/python tests/bench/compile_cost.py [--only spike,monitor] [--flags=-g0,-g]

Works on a copy of ``detect/`` in a temporary folder (the checkout stays as it is); one
module at a time, each step in its own process, so the figures are CPU time
(``RUSAGE_CHILDREN``), not wall time: the neighbours' load does not enter them. What the
compiled build buys per module is tests/bench/compiled_core.py's.
"""

from __future__ import annotations

import argparse
import os
import resource
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = runpy.run_path(str(ROOT / "detect" / "build.py"))

CYTHONIZE = """
import sys
from Cython.Build import cythonize
from setuptools import Extension
name, src, inc, directives = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
cythonize([Extension(name, [src])], compiler_directives=directives, include_path=[inc], quiet=True)
"""


def _cpu(cmd: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, cwd=cwd, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated modules (default: all of MODULES)")
    ap.add_argument("--flags", default="-g0,-g", help="comma-separated debug flags to compare")
    args = ap.parse_args()
    try:
        import Cython  # noqa: F401
    except ImportError:
        print("Cython is not installed: pip install cython")
        return 0
    modules = [m for m in args.only.split(",") if m] or list(BUILD["MODULES"])
    flags = [f for f in args.flags.split(",") if f]
    cflags = sysconfig.get_config_var("CFLAGS").split()
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory(prefix="wtwin-compile-cost-") as tmp:
        tmp = Path(tmp)
        pkg = tmp / "wtwin" / "detect"
        shutil.copytree(ROOT / "detect", pkg, ignore=shutil.ignore_patterns(
            "*.c", "*.so", "*.html", "_compiled.json", "__pycache__"))
        (tmp / "wtwin" / "__init__.py").write_text("")
        print(f"{'module':<11} {'cython s':>8} " + " ".join(f"{'cc ' + f + ' s':>10} {'.so ' + f + ' KB':>12}"
                                                           for f in flags) + f"  ({' '.join(cc)} {' '.join(cflags)})")
        total = {f: 0.0 for f in flags}
        total_cy = 0.0
        for m in modules:
            cy = _cpu([sys.executable, "-c", CYTHONIZE, f"wtwin.detect.{m}", f"wtwin/detect/{m}.py",
                       str(tmp), repr(BUILD["DIRECTIVES"])], tmp)
            total_cy += cy
            row = f"{m:<11} {cy:8.1f} "
            for f in flags:
                obj, so = tmp / f"{m}{f}.o", tmp / f"{m}{f}.so"
                t = _cpu([*cc, "-pthread", "-fPIC", *cflags, f, "-ffp-contract=off", f"-I{include}",
                          "-c", f"wtwin/detect/{m}.c", "-o", str(obj)], tmp)
                t += _cpu([*cc, "-shared", f, str(obj), "-o", str(so)], tmp)
                total[f] += t
                row += f"{t:10.1f} {so.stat().st_size / 1024:12.0f} "
            print(row, flush=True)
        print(f"{'total':<11} {total_cy:8.1f} " + " ".join(f"{total[f]:10.1f} {'':>12}" for f in flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
