"""What every detector shares: argument checks (`errors`), clone/repr, exact snapshots, the registry.

A detector stores its constructor arguments under their own names and its learned state
in attributes prefixed ``_`` holding only plain Python values (floats, ints, bools,
strings, lists, dicts of those), so ``snapshot()`` is msgpack/JSON-safe and
``restore()`` is exact. Attributes prefixed ``_c_`` are constants derived from the
arguments (per-step EWMA weights): not state, so not in the snapshot.
"""

from __future__ import annotations

import copy
import inspect
import operator
from typing import Any, Callable, ClassVar

from .errors import ConfigError, check, fraction, positive  # noqa: F401  (the detectors import them from here)

REGISTRY: dict[str, type["Detector"]] = {}
# class -> (names of its learned state, obj -> tuple of their values)
_STATE: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple]]] = {}


def register(cls: type["Detector"]) -> type["Detector"]:
    """Class decorator: make ``cls`` available as ``REGISTRY[cls.name]``."""
    if cls.name in REGISTRY:
        raise ConfigError(f"detector name {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def decay(dt: float, halflife: float) -> float:
    """EWMA weight of the old value after ``dt`` steps with a half-life in steps."""
    return 0.5 ** (max(dt, 0.0) / halflife)


GAP = 4.0   # a gap counts as at most GAP x the usual gap between a stream's points


def gap_decay(dt: float, usual: float, halflife: float) -> float:
    """`decay` for a point after a gap counted as at most ``GAP`` x ``usual`` (an EWMA of
    the stream's gaps): one point after a pause, or after a resume's rewind, must not
    replace a level or a noise scale on its own. A sparse log's usual gap is its spacing,
    so its points keep their full weight."""
    cap = GAP * usual
    return 0.5 ** ((dt if dt < cap else cap) / halflife) if dt > 0.0 else 1.0


class Detector:
    """Base class: subclasses set ``name`` and implement ``update``."""

    name: ClassVar[str] = ""

    def _params(self) -> dict[str, Any]:
        sig = inspect.signature(type(self).__init__)
        return {p: getattr(self, p) for p in sig.parameters if p != "self"}

    def clone(self) -> "Detector":
        """A fresh detector with the same arguments and no learned state."""
        return type(self)(**self._params())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def snapshot(self, copy: bool = True) -> dict[str, Any]:
        """Learned state as plain values; `restore` of it gives back an identical detector.

        ``copy=False`` hands out the live values, for a caller that serializes them at
        once on the same thread (the store does): no copy of the summary is made."""
        names, values = self._state()
        if copy:
            return {k: _copy(v) for k, v in zip(names, values(self))}
        return dict(zip(names, values(self)))

    def _state(self) -> tuple[tuple[str, ...], Callable[[Any], tuple]]:
        """Names of the learned state, read off a fresh instance once per class, and a
        getter of their values (one C call: the store snapshots every busy run).

        Not ``vars(self)``: on CPython 3.11 that materializes the instance's ``__dict__``
        and every attribute access of this detector gets slower for the rest of its life
        (~15% on ``update()``), which a periodic snapshot would do to every live run."""
        cls = type(self)
        state = _STATE.get(cls)
        if state is None:
            names = tuple(k for k in vars(self.clone())
                          if k.startswith("_") and not k.startswith("_c_"))
            one = operator.attrgetter(*names)
            state = _STATE[cls] = (names, one if len(names) > 1 else (lambda o: (one(o),)))
        return state

    def restore(self, snap: dict[str, Any]) -> None:
        for k, v in snap.items():
            if not k.startswith("_") or k.startswith("_c_") or not hasattr(self, k):
                raise ConfigError(f"snapshot key {k!r} is not state of {self.name}")
            setattr(self, k, _copy(v))


def _copy(v: Any) -> Any:
    """Deep copy of plain state (lists and dicts of scalars), several times cheaper than
    `copy.deepcopy`, which the run table pays on every periodic snapshot."""
    t = type(v)
    if t is list:
        return [_copy(x) for x in v]
    if t is dict:
        return {k: _copy(x) for k, x in v.items()}
    if t is tuple:
        return tuple(_copy(x) for x in v)
    if t in (float, int, bool, str, type(None)):
        return v
    return copy.deepcopy(v)
