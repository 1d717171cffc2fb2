"""Pure detectors and the per-run monitor that runs them side by side.

One detector a module, each registered by name in `REGISTRY`: ``forecast``,
``finetuning``, ``spike``, ``nonfinite``, ``divergence``, ``plateau``, ``overfit``,
``resume_jump``, ``rise``, ``frozen_loader``, ``chance``, ``effect`` and ``gradnorm`` (context for
pages, never a page). Adding one: docs/ARCHITECTURE.md, "Adding a detector".

Two builds of one source (docs/COMPILED.md): the modules of `build.MODULES` compiled to C
when the install had Cython and a compiler, else the ``.py`` files. ``COMPILED`` says
which one is loaded and ``BUILD`` why, in words. ``WTWIN_PURE_PYTHON=1`` in the
environment loads the ``.py`` files even where the compiled modules are (as msgpack's
``MSGPACK_PUREPYTHON``); so does a source edited since the build (`build.stale`). The
choice is `build.choose`, the one the daemon's compiled path makes too.
"""

from __future__ import annotations

import importlib.machinery
import os

from . import build as _build

COMPILED, BUILD = _build.choose(os.path.dirname(__file__))
if not COMPILED:
    _build.load_pure(__name__, os.path.dirname(__file__))

from . import base as _base  # noqa: E402
from . import chance, divergence, early_rise, effect, forecast, frozen_loader, gradnorm, memory, nonfinite, overfit, plateau, resume, rise, spike, throughput  # noqa: E402,F401
from . import reference  # noqa: E402,F401  (the reference detector: compiled with the others)
from .base import REGISTRY, Detector  # noqa: E402
from .finding import Finding, MonitorState  # noqa: E402
from .monitor import RunMonitor, WTwinMonitor  # noqa: E402
from .presets import PRESETS  # noqa: E402

if COMPILED and not isinstance(_base.__loader__, importlib.machinery.ExtensionFileLoader):
    raise ImportError(f"wtwin.detect: the compiled build was expected, {_base.__file__} loaded")

__all__ = ["BUILD", "COMPILED", "Detector", "Finding", "MonitorState", "PRESETS", "REGISTRY",
           "RunMonitor", "WTwinMonitor"]
