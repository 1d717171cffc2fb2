"""Which modules of `wtwin.emitters` compile to C, and which build is loaded: the list
``setup.py`` reads, and the choice ``wtwin.emitters`` makes at import (``COMPILED``,
``BUILD``) by the rules every compiled package shares (`wtwin.compiled.rules`).

Only the daemon's side of the protocol pays for a compile: the fast checks of loss
events (``fast_checks``), which every frame the daemon receives goes through, and the
decoder of plain loss frames (``fast_decode``, with its key table ``frame_keys``), which
the daemon tries first when compiled. A trainer's install is pure (nothing compiled, no ``.so`` here): the choice
then costs one look at this folder.
"""

from __future__ import annotations

import os

from wtwin.compiled import rules

MODULES = ("fast_checks", "frame_keys", "fast_decode")
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "wtwin.emitters"


def choose(folder: str = HERE) -> tuple[bool, str]:
    """(compiled?, why): pure at no cost where nothing is compiled (a trainer's install)."""
    if not rules.built(folder, MODULES) and os.environ.get("WTWIN_PURE_PYTHON", "") in ("", "0"):
        return False, "pure Python (not compiled)"
    return rules.choose(folder, MODULES)


def load_pure(folder: str = HERE) -> None:
    """From now on the ``.py`` files of `MODULES` load (once per process); nothing to do
    where none is compiled."""
    if rules.built(folder, MODULES):
        rules.load_pure(PACKAGE, folder, MODULES)
