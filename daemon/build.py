"""Which modules of `wtwin.daemon` compile to C (the per-event path), and which build is
loaded: the list ``setup.py`` reads (it runs this file without importing the package),
and the choice ``wtwin.daemon`` makes at import (``COMPILED``, ``BUILD``).

The same one-source scheme as `wtwin.detect` (detect/build.py, docs/COMPILED.md): the
``.py`` files are the source, Cython's pure-Python mode compiles them beside themselves,
a stamp (`STAMP`) records the sources compiled, and the pure build runs instead where
the stamp does not match (a source edited since), where a module is missing, or where
``WTWIN_PURE_PYTHON=1`` is set.
"""

from __future__ import annotations

import os
import runpy

# The per-event path: the ingest body, the seq marks, the run's state and the series a
# loss is added to.
MODULES = ("ingest_marks", "series", "run_state", "ingest", "envelopes", "inbound")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "wtwin.daemon"


# The stamp's rules and the choice of build are detect/build.py's, for this package's
# modules: run from its path (``setup.py`` runs this file without importing the package;
# installed, the two folders are siblings as in a checkout).
_STAMPS = runpy.run_path(os.path.join(HERE, os.pardir, "detect", "build.py"))
fingerprint, STAMP = _STAMPS["fingerprint"], _STAMPS["STAMP"]


def write_stamp(folder: str, source: str = HERE) -> None:
    """Record the sources a build compiled (``setup.py``, beside the extensions)."""
    _STAMPS["write_stamp"](folder, source, MODULES)


def stale(folder: str = HERE) -> list[str]:
    """The modules whose source changed since the build (all of them without a stamp)."""
    return _STAMPS["stale"](folder, MODULES)


def choose(folder: str = HERE) -> tuple[bool, str]:
    """(compiled?, why) from the environment and the files in ``folder``: `wtwin.detect`'s
    choice, for this package's modules."""
    return _STAMPS["choose"](folder, MODULES)


def load_pure(folder: str = HERE) -> None:
    """From now on the ``.py`` files of `MODULES` load (once per process)."""
    _STAMPS["load_pure"](PACKAGE, folder, MODULES)
