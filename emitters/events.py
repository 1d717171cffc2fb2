"""Events from the tuples the caller's thread queues: the I/O thread's one conversion step.

``emit.loss()`` and friends only append a tuple (kind, wall time, raw values) to a deque;
the emitter's I/O thread turns each into a wire event here (``BUILDERS[kind](item)``),
converting numbers with ``float()``/``int()`` (Python and numpy numbers, 0-d tensors,
without importing numpy or torch). A value that cannot be converted raises, and the
emitter counts and drops that one event (``invalid``).
"""

from __future__ import annotations

import os

from .bounds import scalar_name_ok
from .schema import TIMING

# a loss event's optional fields beyond lr and grad_norm (``emit.loss(..., **extra)``)
_EXTRA = ("tokens", "rank", *TIMING)
_INTS = ("rank", "gpus", "phase")

def _f(x) -> float:
    """float() of a Python/numpy number or a 0-d tensor (detached, so no autograd warning)."""
    detach = getattr(x, "detach", None)
    return float(detach() if detach is not None else x)


def _loss(item):
    _, ts, step, loss, lr, grad_norm, extra = item
    ev = {"type": "loss", "ts": ts, "step": int(step), "loss": _f(loss)}
    if lr is not None:
        ev["lr"] = _f(lr)
    if grad_norm is not None:
        ev["grad_norm"] = _f(grad_norm)
    for key in _EXTRA:
        if extra.get(key) is not None:
            ev[key] = int(extra[key]) if key in _INTS else _f(extra[key])
    return ev


def _eval(item):
    _, ts, step, metrics = item
    return {"type": "eval", "ts": ts, "step": int(step),
            "metrics": {str(k): _f(v) for k, v in metrics.items()}}


def _checkpoint(item):
    _, ts, step, path, fmt, epoch, want = item
    ev = {"type": "checkpoint", "ts": ts, "step": int(step), "path": os.fspath(path),
          "format": fmt, "want": list(want)}
    if epoch is not None:
        ev["epoch"] = int(epoch)
    return ev


def _scalar(item):
    _, ts, step, name, value = item
    if not scalar_name_ok(name):   # counted as ``invalid`` by the emitter, never sent
        raise ValueError(f"scalar name {name!r}: 1..64 letters, digits or _./-:")
    return {"type": "scalar", "ts": ts, "step": int(step), "name": name, "value": _f(value)}


BUILDERS = {
    "loss": _loss,
    "eval": _eval,
    "scalar": _scalar,
    "checkpoint": _checkpoint,
    "heartbeat": lambda item: {"type": "heartbeat", "ts": item[1]},
    "run_start": lambda item: {"type": "run_start", "ts": item[1], **item[2]},
    "run_end": lambda item: {"type": "run_end", "ts": item[1], "status": item[2]},
    "rewind": lambda item: {"type": "rewind", "ts": item[1], "step": int(item[2]),
                            "from_step": int(item[3]),
                            **{k: v for k, v in item[4].items() if v is not None}},
}
