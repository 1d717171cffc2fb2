"""Which modules of `wtwin.detect` compile to C, and how: the one list ``setup.py`` and
`wtwin.detect` both read (``setup.py`` runs this file without importing the package).

The ``.py`` files are the source (Cython's pure-Python mode, docs/COMPILED.md). A
compiled module sits beside its ``.py`` as ``<name>.cpython-3XX-<platform>.so``; the
build writes `STAMP` next to them: the digest of each module's sources (``.py`` and
``.pxd``) it compiled, so that a source edited since the build is noticed at import
(`stale`) and the pure build runs instead of C that no longer matches its source.
"""

from __future__ import annotations

import hashlib
import json
import os

# Compiled together or not at all: a compiled module imports the C types of the others.
# Only the modules that pay for their compile (docs/BENCHMARKS.md, "Install"): every
# detector and the monitor (compiled: 0.1-0.35x the pure CPU per update), and ``laws``
# (the refits' Python around numpy: compiled, a young run's refits cost what they did
# before the fit was normalized; as Python, 5% more: docs/BENCHMARKS.md, "RunMonitor per
# update: back under 8969fc8"). Left as Python: ``finding`` (NamedTuples: nothing to
# compile) and ``mpl`` (the multi-power law's refits, only with an lr).
MODULES = ("base", "monitor", "spike", "divergence", "rise", "nonfinite", "gradnorm",
           "collapse", "resume", "forecast", "plateau", "effect", "overfit", "rewind", "laws", "reference")

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
