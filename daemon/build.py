"""Which modules of `wtwin.daemon` compile to C (the per-event path), and which build is
loaded: the list ``setup.py`` reads, and the choice ``wtwin.daemon`` makes at import
(``COMPILED``, ``BUILD``) by the rules every compiled package shares
(`wtwin.compiled.rules`, docs/COMPILED.md).
"""

from __future__ import annotations

import os

from wtwin.compiled import rules

# The per-event path: the ingest body, the seq marks, the run's state and the series a
# loss is added to.
MODULES = ("ingest_marks", "series", "run_state", "ingest", "envelopes", "inbound")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "wtwin.daemon"


def stale(folder: str = HERE) -> list[str]:
    """The modules whose source changed since the build (all of them without a stamp)."""
    return rules.stale(folder, MODULES)


def choose(folder: str = HERE) -> tuple[bool, str]:
    """(compiled?, why) from the environment and the files in ``folder``."""
    return rules.choose(folder, MODULES)


def load_pure(folder: str = HERE) -> None:
    """From now on the ``.py`` files of `MODULES` load (once per process)."""
    rules.load_pure(PACKAGE, folder, MODULES)


def words(package) -> str:
    """Why ``package`` (`wtwin.detect`, `wtwin.daemon`, `wtwin.emitters`) runs the build it
    runs: its ``BUILD``, and where it fell back, the shared rules' reason and the one
    command that fixes it (detect/build.py's own words predate them)."""
    if package.COMPILED:
        return package.BUILD
    if package.__name__ == "wtwin.emitters" and not rules.built(os.path.dirname(package.__file__),
                                                                package.build.MODULES):
        return package.BUILD
    return rules.choose(os.path.dirname(package.__file__), package.build.MODULES)[1]
