"""Which modules of `wtwin.detect` compile to C, and how: the one list ``setup.py`` and
`wtwin.detect` both read (``setup.py`` runs this file without importing the package).

The ``.py`` files are the source (Cython's pure-Python mode, docs/COMPILED.md). A
compiled module sits beside its ``.py`` as ``<name>.cpython-3XX-<platform>.so``; the
build writes `STAMP` next to them: the digest of each module's sources (``.py`` and
``.pxd``) it compiled, so that a source edited since the build is noticed at import
(`stale`) and the pure build runs instead of C that no longer matches its source.

`choose` and `load_pure` are the one choice of build, for this package and for
``wtwin.daemon`` (daemon/build.py runs this file for its own modules).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys

# Compiled together or not at all: a compiled module imports the C types of the others.
# Only the modules that pay for their compile (docs/BENCHMARKS.md, "Install"): every
# detector and the monitor (compiled: 0.1-0.35x the pure CPU per update), and ``laws``
# and ``lawfit`` (the refits' Python around numpy: compiled, a young run's refits cost
# what they did before the fit was normalized; as Python, 5% more: docs/BENCHMARKS.md,
# "RunMonitor per update: back under 8969fc8"). Left as Python: ``finding``
# (NamedTuples: nothing to compile) and ``mpl`` (the multi-power law's refits, only with
# an lr).
MODULES = ("base", "arbiter", "rules", "monitor", "spike", "divergence", "rise", "nonfinite",
           "gradnorm", "frozen_loader", "throughput", "memory", "resume", "forecast_fit", "forecast",
           "plateau_slope", "plateau", "effect", "overfit", "rewind", "laws", "lawfit",
           "reference")

# Python semantics, bit for bit: `cdivision` and `cpow` stay off (Cython's defaults), and
# the annotations of arguments (``step: int``) document, they do not convert: the types
# are in the ``.pxd`` files and in ``cython.*`` annotations of locals.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "embedsignature": True,
              "binding": True, "always_allow_keywords": True}

STAMP = "_compiled.json"
HERE = os.path.dirname(os.path.abspath(__file__))


def fingerprint(module: str, folder: str = HERE) -> str:
    """sha256 of ``module``'s ``.py`` and ``.pxd`` (when it has one)."""
    h = hashlib.sha256()
    for ext in (".py", ".pxd"):
        path = os.path.join(folder, module + ext)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(ext.encode() + f.read())
    return h.hexdigest()


def write_stamp(folder: str, source: str = HERE, modules: tuple = MODULES) -> None:
    """Record the sources a build compiled (``setup.py``, beside the extensions)."""
    with open(os.path.join(folder, STAMP), "w") as f:
        json.dump({m: fingerprint(m, source) for m in modules}, f, indent=1, sort_keys=True)


def stale(folder: str = HERE, modules: tuple = MODULES) -> list[str]:
    """The modules whose source changed since the build (all of them without a stamp)."""
    try:
        with open(os.path.join(folder, STAMP)) as f:
            built = json.load(f)
    except (OSError, ValueError):
        return list(modules)
    return [m for m in modules if built.get(m) != fingerprint(m, folder)]


def choose(folder: str = HERE, modules: tuple = MODULES) -> tuple[bool, str]:
    """(compiled?, why) from the environment and the files in ``folder``."""
    if os.environ.get("WTWIN_PURE_PYTHON", "") not in ("", "0"):
        return False, "pure Python (WTWIN_PURE_PYTHON is set)"
    built = [m for m in modules if any(os.path.exists(os.path.join(folder, m + s))
                                       for s in importlib.machinery.EXTENSION_SUFFIXES)]
    if not built:
        return False, ("pure Python (not compiled: a plain install is pure; WTWIN_COMPILE=1 at "
                       "install compiles the core where there is a C compiler: docs/INSTALL.md)")
    if len(built) < len(modules):
        missing = sorted(set(modules) - set(built))
        return False, f"pure Python (compiled build incomplete, missing {', '.join(missing)})"
    old = stale(folder, modules)
    if old:
        return False, (f"pure Python (compiled build out of date: {', '.join(old)} changed "
                       "since it was built; `make build` rebuilds it)")
    return True, "compiled (Cython)"


class PureFinder:
    """Finds the ``.py`` file of a compiled module, so that it loads instead of the C one."""

    def __init__(self, package: str, folder: str, modules: tuple) -> None:
        self.package, self.folder, self.modules = package, folder, modules

    def find_spec(self, name, path=None, target=None):
        pkg, _, mod = name.rpartition(".")
        if pkg != self.package or mod not in self.modules:
            return None
        return importlib.util.spec_from_file_location(name, os.path.join(self.folder, mod + ".py"))


def load_pure(package: str, folder: str = HERE, modules: tuple = MODULES) -> None:
    """From now on the ``.py`` files of ``package``'s ``modules`` load (once per process)."""
    if not any(type(f).__name__ == "PureFinder" and getattr(f, "package", None) == package
               for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder(package, folder, modules))
