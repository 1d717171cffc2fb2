"""Which modules of `wtwin.emitters` compile to C, and which build is loaded: the list
``setup.py`` reads (it runs this file without importing the package), and the choice
``wtwin.emitters`` makes at import (``COMPILED``, ``BUILD``).

Only the daemon's side of the protocol pays for a compile: the fast checks of loss
events (``fast_checks``), which every frame the daemon receives goes through, and the
decoder of plain loss frames (``fast_decode``), which the daemon tries first when
compiled. A trainer's
install is pure (nothing compiled, no ``.so`` here): the choice then costs one look at
this folder. Otherwise the rules are `wtwin.detect`'s (detect/build.py, docs/COMPILED.md):
a stamp of the sources compiled, the pure build where a source changed since or where
``WTWIN_PURE_PYTHON=1`` is set.
"""

from __future__ import annotations

import importlib.machinery
import os
import runpy

MODULES = ("fast_checks", "fast_decode")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "wtwin.emitters"
_RULES: dict = {}


def _rules() -> dict:
    """detect/build.py's functions, run from its path (no import of `wtwin.detect`)."""
    if not _RULES:
        _RULES.update(runpy.run_path(os.path.join(HERE, os.pardir, "detect", "build.py")))
    return _RULES


def _built(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, m + s))
               for m in MODULES for s in importlib.machinery.EXTENSION_SUFFIXES)


def write_stamp(folder: str, source: str = HERE) -> None:
    """Record the sources a build compiled (``setup.py``, beside the extensions)."""
    _rules()["write_stamp"](folder, source, MODULES)


def choose(folder: str = HERE) -> tuple[bool, str]:
    """(compiled?, why): `wtwin.detect`'s choice, for this package's modules."""
    if not _built(folder) and os.environ.get("WTWIN_PURE_PYTHON", "") in ("", "0"):
        return False, "pure Python (not compiled)"
    return _rules()["choose"](folder, MODULES)


def load_pure(folder: str = HERE) -> None:
    """From now on the ``.py`` files of `MODULES` load (once per process); nothing to do
    where none is compiled."""
    if _built(folder):
        _rules()["load_pure"](PACKAGE, folder, MODULES)
