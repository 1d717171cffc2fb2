"""Which modules of `wtwin.detect` compile to C, and which build is loaded: the list
``setup.py`` reads (``MODULES``, read without running this file) and the choice
``wtwin.detect`` makes at import (``COMPILED``, ``BUILD``), by the rules every compiled
package shares (`wtwin.compiled.rules`, docs/COMPILED.md).

The ``.py`` files are the source (Cython's pure-Python mode). A compiled module sits
beside its ``.py`` as ``<name>.cpython-3XX-<platform>.so``; the build writes
``STAMP`` next to them: the digest of each module's sources (``.py`` and ``.pxd``) it
compiled, so that a source edited since the build is noticed at import (`stale`) and the
pure build runs instead of C that no longer matches its source.
"""

from __future__ import annotations

import os

from wtwin.compiled import rules
from wtwin.compiled.rules import DIRECTIVES, STAMP  # noqa: F401  (the benches and tests read them here)

# Compiled together or not at all: a compiled module imports the C types of the others.
# Only the modules that pay for their compile (docs/BENCHMARKS.md, "Install"): every
# detector and the monitor (compiled: 0.1-0.35x the pure CPU per update), and ``laws``
# and ``lawfit`` (the refits' Python around numpy: compiled, a young run's refits cost
# what they did before the fit was normalized; as Python, 5% more: docs/BENCHMARKS.md,
# "RunMonitor per update: back under 8969fc8"), and ``resolution`` (asked per point by
# two detectors on every rounded log, most logs: as Python it doubled the update's cost,
# docs/BENCHMARKS.md, "A log as it is printed"). Left as Python: ``finding``
# (NamedTuples: nothing to compile) and ``mpl`` (the multi-power law's refits, only with
# an lr).
MODULES = ("base", "arbiter", "rules", "monitor", "spike", "divergence", "rise", "nonfinite",
           "gradnorm", "resolution", "frozen_loader", "chance", "early_rise", "throughput", "memory", "resume",
           "forecast_fit", "forecast", "plateau_slope", "plateau", "effect", "overfit", "rewind", "laws", "lawfit",
           "reference")
HERE = os.path.dirname(os.path.abspath(__file__))


def fingerprint(module: str, folder: str = HERE) -> str:
    """sha256 of ``module``'s ``.py`` and ``.pxd`` (when it has one)."""
    return rules.fingerprint(module, folder)


def write_stamp(folder: str, source: str = HERE, modules: tuple = MODULES) -> None:
    """Record the sources a build compiled (``setup.py``, beside the extensions)."""
    rules.write_stamp(folder, source, modules)


def stale(folder: str = HERE, modules: tuple = MODULES) -> list[str]:
    """The modules whose source changed since the build (all of them without a stamp)."""
    return rules.stale(folder, modules)


def choose(folder: str = HERE, modules: tuple = MODULES) -> tuple[bool, str]:
    """(compiled?, why) from the environment and the files in ``folder``."""
    return rules.choose(folder, modules)


def load_pure(package: str, folder: str = HERE, modules: tuple = MODULES) -> None:
    """From now on the ``.py`` files of ``package``'s ``modules`` load (once per process)."""
    rules.load_pure(package, folder, modules)
