"""Pure detectors and the per-run monitor that runs them side by side.

One detector a module, each registered by name in `REGISTRY`: ``forecast``,
``finetuning``, ``spike``, ``nonfinite``, ``divergence``, ``plateau``, ``overfit``,
``resume_jump``, ``rise``, ``effect`` and ``gradnorm`` (context for pages, never a page).

Two builds of one source (docs/COMPILED.md): the modules of `build.MODULES` compiled to C
when the install had Cython and a compiler, else the ``.py`` files. ``COMPILED`` says
which one is loaded and ``BUILD`` why, in words. ``WTWIN_PURE_PYTHON=1`` in the
environment loads the ``.py`` files even where the compiled modules are (as msgpack's
``MSGPACK_PUREPYTHON``); so does a source edited since the build (`build.stale`).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

from . import build as _build


def _choose() -> tuple[bool, str]:
    """(compiled?, why) from the environment and the files beside this one."""
    if os.environ.get("WTWIN_PURE_PYTHON", "") not in ("", "0"):
        return False, "pure Python (WTWIN_PURE_PYTHON is set)"
    here = os.path.dirname(__file__)
    built = [m for m in _build.MODULES
             if any(os.path.exists(os.path.join(here, m + s))
                    for s in importlib.machinery.EXTENSION_SUFFIXES)]
    if not built:
        return False, ("pure Python (not compiled: a plain install is pure; WTWIN_COMPILE=1 at "
                       "install compiles the core where there is a C compiler: docs/INSTALL.md)")
    if len(built) < len(_build.MODULES):
        missing = sorted(set(_build.MODULES) - set(built))
        return False, f"pure Python (compiled build incomplete, missing {', '.join(missing)})"
    old = _build.stale(here)
    if old:
        return False, (f"pure Python (compiled build out of date: {', '.join(old)} changed "
                       "since it was built; `make build` rebuilds it)")
    return True, "compiled (Cython)"


class _PureFinder:
    """Finds the ``.py`` file of a compiled module, so that it loads instead of the C one."""

    def __init__(self, package: str, folder: str) -> None:
        self.package, self.folder = package, folder

    def find_spec(self, name, path=None, target=None):
        pkg, _, mod = name.rpartition(".")
        if pkg != self.package or mod not in _build.MODULES:
            return None
        return importlib.util.spec_from_file_location(name, os.path.join(self.folder, mod + ".py"))


COMPILED, BUILD = _choose()
if not COMPILED and not any(isinstance(f, _PureFinder) and f.package == __name__
                            for f in sys.meta_path):
    sys.meta_path.insert(0, _PureFinder(__name__, os.path.dirname(__file__)))

from . import base as _base  # noqa: E402
from . import collapse, divergence, effect, forecast, gradnorm, nonfinite, overfit, plateau, resume, rise, spike  # noqa: E402,F401
from . import reference  # noqa: E402,F401  (the reference detector: compiled with the others)
from .base import REGISTRY, Detector  # noqa: E402
from .finding import Finding, MonitorState  # noqa: E402
from .monitor import RunMonitor, WTwinMonitor  # noqa: E402
from .presets import PRESETS  # noqa: E402

if COMPILED and not isinstance(_base.__loader__, importlib.machinery.ExtensionFileLoader):
    raise ImportError(f"wtwin.detect: the compiled build was expected, {_base.__file__} loaded")

__all__ = ["BUILD", "COMPILED", "Detector", "Finding", "MonitorState", "PRESETS", "REGISTRY",
           "RunMonitor", "WTwinMonitor"]
