"""Which build of a package loads, compiled or pure, and why, in words a user can act on.

The ``.py`` files are the source (Cython's pure-Python mode, docs/COMPILED.md). A
compiled module sits beside its ``.py`` as ``<name>.cpython-3XX-<platform>.so``; the
build writes `STAMP` next to them: the digest of each module's sources (``.py`` and
``.pxd``) it compiled, so that a source edited since the build is noticed at import
(`stale`) and the pure build runs instead of C that no longer matches its source.

Each package lists its compiled modules in its ``build.py`` (``MODULES``, read by
``setup.py`` without importing anything) and calls `choose` and `load_pure` here at
import. When a compiled build falls back, `choose` says why and gives the one command
that fixes it where the package lives: ``make build`` in a checkout, a compiled
reinstall for a pip install.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys

# Python semantics, bit for bit: `cdivision` and `cpow` stay off (Cython's defaults), and
# the annotations of arguments (``step: int``) document, they do not convert: the types
# are in the ``.pxd`` files and in ``cython.*`` annotations of locals.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "embedsignature": True,
              "binding": True, "always_allow_keywords": True}
STAMP = "_compiled.json"
# what a pip user runs to get a compiled install back (docs/INSTALL.md)
PIP_FIX = ("WTWIN_COMPILE=1 pip install --force-reinstall --no-deps <what you installed: "
           "the checkout's path or the wheel>")


def fingerprint(module: str, folder: str) -> str:
    """sha256 of ``module``'s ``.py`` and ``.pxd`` (when it has one)."""
    h = hashlib.sha256()
    for ext in (".py", ".pxd"):
        path = os.path.join(folder, module + ext)
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(ext.encode() + f.read())
    return h.hexdigest()


def write_stamp(folder: str, source: str, modules: tuple) -> None:
    """Record the sources a build compiled (``setup.py``, beside the extensions)."""
    with open(os.path.join(folder, STAMP), "w") as f:
        json.dump({m: fingerprint(m, source) for m in modules}, f, indent=1, sort_keys=True)


def stale(folder: str, modules: tuple) -> list[str]:
    """The modules whose source changed since the build (all of them without a stamp)."""
    try:
        with open(os.path.join(folder, STAMP)) as f:
            built = json.load(f)
    except (OSError, ValueError):
        return list(modules)
    return [m for m in modules if built.get(m) != fingerprint(m, folder)]


def in_checkout(folder: str) -> bool:
    """The package is a checkout's folder (an editable install), not an installed copy."""
    return os.path.exists(os.path.join(folder, os.pardir, "setup.py"))


def fix(folder: str) -> str:
    """The one command that rebuilds the compiled build where ``folder`` lives."""
    return "`make build`" if in_checkout(folder) else f"`{PIP_FIX}`"


def built(folder: str, modules: tuple) -> list[str]:
    return [m for m in modules if any(os.path.exists(os.path.join(folder, m + s))
                                      for s in importlib.machinery.EXTENSION_SUFFIXES)]


def choose(folder: str, modules: tuple) -> tuple[bool, str]:
    """(compiled?, why) from the environment and the files in ``folder``."""
    if os.environ.get("WTWIN_PURE_PYTHON", "") not in ("", "0"):
        return False, "pure Python (WTWIN_PURE_PYTHON is set)"
    have = built(folder, modules)
    if not have:
        return False, ("pure Python (not compiled: a plain install is pure; WTWIN_COMPILE=1 at "
                       "install compiles the core where there is a C compiler: docs/INSTALL.md)")
    if len(have) < len(modules):
        missing = ", ".join(sorted(set(modules) - set(have)))
        return False, (f"pure Python (compiled build incomplete: no extension for {missing}; "
                       f"{fix(folder)} rebuilds it)")
    old = stale(folder, modules)
    if old:
        gone = [m for m in old if not os.path.exists(os.path.join(folder, m + ".py"))]
        why = (f"their source files ({', '.join(gone)}) are not installed" if gone else
               f"{', '.join(old)} differ from the sources it was built from")
        return False, f"pure Python (compiled build out of date: {why}; {fix(folder)} rebuilds it)"
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


def load_pure(package: str, folder: str, modules: tuple) -> None:
    """From now on the ``.py`` files of ``package``'s ``modules`` load (once per process)."""
    if not any(type(f).__name__ == "PureFinder" and getattr(f, "package", None) == package
               for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder(package, folder, modules))
