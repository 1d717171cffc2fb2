"""wtwin.emitters: the trainer side. Imports only pyzmq and msgpack.

    emit = wtwin.emitters.connect(run="gpt-7b-lr3e-4")
    emit.loss(step, loss, lr=lr)

Several daemons (shards): ``WTWIN_ENDPOINT="tcp://wtwind-0:5557,tcp://wtwind-1:5557"``;
each run goes to one of them, picked by its name (``shards.py``).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from . import build as _build

# the daemon's compiled build compiles the fast checks (build.py); a trainer's is pure
COMPILED, BUILD = _build.choose()
if not COMPILED:
    _build.load_pure()

from .emitter import Emitter  # noqa: E402
from .endpoints import DEFAULT_ENDPOINT, default_endpoint  # noqa: E402
from .null import NullEmitter  # noqa: E402
from .settings import EmitterSettings  # noqa: E402

__all__ = ["connect", "Emitter", "EmitterSettings", "NullEmitter", "DEFAULT_ENDPOINT", "default_endpoint"]


def _is_rank_zero() -> bool:
    for var in ("RANK", "LOCAL_RANK"):
        val = os.environ.get(var)
        if val not in (None, "", "0"):
            return False
    return True


def connect(endpoint: str | Sequence[str] | None = None, run: str | None = None, *,
            all_ranks: bool = False, **config) -> Emitter | NullEmitter:
    """Return an emitter for ``run`` (a generated id, printed once, when omitted).

    ``endpoint`` (default ``$WTWIN_ENDPOINT``, else the local socket) may name several
    daemons, as a list or separated by commas or whitespace: they are shards, and the
    run's name picks the one it goes to, the same one in every process (docs/SHARDING.md).

    Disabled (a `NullEmitter`) when ``WTWIN_DISABLE=1`` or, unless ``all_ranks``, on
    any process whose ``RANK``/``LOCAL_RANK`` is not 0.
    """
    if os.environ.get("WTWIN_DISABLE", "") not in ("", "0") or not (all_ranks or _is_rank_zero()):
        return NullEmitter(run=run)
    emitter = Emitter(endpoint, run, **config)
    if run is None:
        print(f"wtwin: run id {emitter.run} -> {emitter.endpoint}", file=sys.stderr)
    return emitter
