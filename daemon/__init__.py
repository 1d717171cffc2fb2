"""wtwind: the daemon. ``COMPILED`` says whether its per-event path (``build.MODULES``)
runs compiled, ``BUILD`` why, in words (daemon/build.py)."""

from . import build as _build

COMPILED, BUILD = _build.choose()
if not COMPILED:
    _build.load_pure()
