"""What every detector shares: argument checks (`errors`), clone/repr, exact snapshots, the registry.

A detector stores its constructor arguments under their own names (``ARGS``) and its
learned state in attributes prefixed ``_``, listed in ``STATE``, holding only plain
Python values (floats, ints, bools, strings, lists, dicts of those), so ``snapshot()`` is
msgpack/JSON-safe and ``restore()`` is exact. Attributes prefixed ``_c_`` are constants
derived from the arguments (per-step EWMA weights): not state, so not in the snapshot.

A typed field that has no value yet holds NaN (a ``double``) or `NO_STEP` (a step): the
names in ``OPTIONAL`` are written ``None`` in a snapshot and read back from ``None``, so a
snapshot has the same shape in both builds and as before the compiled core
(docs/COMPILED.md). ``base.pxd`` declares the C side of this module.
"""

from __future__ import annotations

import copy
import inspect
import operator
from typing import Any, Callable

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from .errors import ConfigError, check, fraction, positive  # noqa: F401  (the detectors import them from here)

REGISTRY: dict[str, type] = {}
# class -> (names of its learned state, obj -> tuple of their values, indexes of OPTIONAL ones)
_STATE: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple], tuple[int, ...]]] = {}
_ARGS: dict[type, tuple[str, ...]] = {}

NO_STEP = -(2 ** 63)   # a typed step field with no step: None in states and snapshots
NAN = float("nan")     # a typed float field with no value: None in states and snapshots


def register(cls: type) -> type:
    """Make ``cls`` available as ``REGISTRY[cls.name]`` (a call after the class: a
    compiled class takes no decorator but Cython's)."""
    if cls.name in REGISTRY:
        raise ConfigError(f"detector name {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def decay(dt: float, halflife: float) -> float:
    """EWMA weight of the old value after ``dt`` steps with a half-life in steps."""
    return 0.5 ** (max(dt, 0.0) / halflife)


GAP = 4.0   # a gap counts as at most GAP x the usual gap between a stream's points
_GAP = cython.declare(cython.double, GAP)


@cython.locals(cap=cython.double)
def gap_decay(dt: float, usual: float, halflife: float) -> float:
    """`decay` for a point after a gap counted as at most ``GAP`` x ``usual`` (an EWMA of
    the stream's gaps): one point after a pause, or after a resume's rewind, must not
    replace a level or a noise scale on its own. A sparse log's usual gap is its spacing,
    so its points keep their full weight."""
    cap = _GAP * usual
    return 0.5 ** ((dt if dt < cap else cap) / halflife) if dt > 0.0 else 1.0


@cython.cclass
class Point:
    """One loss event as the monitor feeds it to its detectors (`Detector.see`): one
    record per monitor, refilled per update (no allocation). ``from_step`` is the step a
    resume went back from (`NO_STEP` when the step did not go back); ``l_pred`` and
    ``fc_alert`` are the forecast's, filled once the ``level`` stage has seen the point;
    ``judging`` whether a detector of the loss level is active (the ``last`` stage).

    The run's time and memory (`RunMonitor.update_loss`'s ``ts`` and ``timing``): ``ts``
    the event's send time; ``timed`` whether the update carried any of the others, NaN
    (`NO_STEP` for ``gpus`` and ``phase``) where it did not: ``step_time`` and
    ``data_wait`` in seconds per step, ``tokens`` seen so far, ``mem_alloc``,
    ``mem_reserved`` and ``mem_total`` in bytes, ``gpus``, and ``phase`` (a number the
    trainer changes with an announced schedule change: a batch or sequence-length ramp)."""

    def __init__(self) -> None:
        self.step, self.loss, self.lr, self.grad, self.l_pred = 0, 0.0, None, None, None
        self.s, self.from_step, self.x = 0, NO_STEP, 0.0
        self.fc_alert = self.judging = False
        self.ts = self.step_time = self.data_wait = self.tokens = NAN
        self.mem_alloc = self.mem_reserved = self.mem_total = NAN
        self.gpus = self.phase = NO_STEP
        self.timed = False


# The stages of an update, in order (`Detector.FEED`): ``first`` before the non-finite
# check (a non-finite loss stops the update there), ``level`` the loss alone, ``trend``
# with the forecast's prediction, ``last`` with the arbitration's inputs.
STAGES = ("first", "level", "trend", "last")


@cython.cclass
class Detector:
    """Base class: subclasses set ``name``, ``ARGS`` (the constructor's arguments),
    ``STATE`` (the learned state), ``OPTIONAL`` (the state that may be None), ``FEED``
    (the stage of an update that feeds it a `Point`: `STAGES`, "" for a detector the
    monitor does not feed) and implement ``update`` and ``see``; a detector that pages
    also sets ``KIND`` (the alert kind) and implements ``verdict``; one whose page is an
    incident of the loss level seen another way sets ``GIVES_WAY``, the kinds whose
    critical page it gives way to (`rules.own_pages`); one whose critical page says the
    whole incident sets ``ABSORBS``: the rules of the loss level then open no page beside
    it (`rules.absorbed`)."""

    name = ""
    FEED = ""
    KIND = ""
    GIVES_WAY = ()
    ABSORBS = False

    def see(self, p: Point) -> None:
        """Take one loss event (`Point`): the monitor's one call per update."""
        raise NotImplementedError(f"{type(self).__name__} is not fed by the monitor")

    def asks(self) -> bool:
        """Is this detector's verdict active (a C call: the rules ask it per update)?"""
        return False

    def verdict(self):
        """This detector's verdict at its last point (`finding.Verdict`)."""
        raise NotImplementedError(f"{type(self).__name__} gives no verdict")

    def _params(self) -> dict[str, Any]:
        return {p: getattr(self, p) for p in _args(type(self))}

    def clone(self):
        """A fresh detector with the same arguments and no learned state."""
        return type(self)(**self._params())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def snapshot(self, copy: bool = True) -> dict[str, Any]:
        """Learned state as plain values; `restore` of it gives back an identical detector.

        ``copy=False`` hands out the live values, for a caller that serializes them at
        once on the same thread (the store does): no copy of the summary is made."""
        names, values, optional = _state(self)
        vals = values(self)
        if optional:
            vals = list(vals)
            for i in optional:
                v = vals[i]
                if v != v or v == NO_STEP:      # NaN or NO_STEP: no value yet
                    vals[i] = None
        if copy:
            return {k: _copy(v) for k, v in zip(names, vals)}
        return dict(zip(names, vals))

    def restore(self, snap: dict[str, Any]) -> None:
        names, _values, _optional = _state(self)
        optional = getattr(type(self), "OPTIONAL", ())
        for k, v in snap.items():
            if k not in names:
                raise ConfigError(f"snapshot key {k!r} is not state of {self.name}")
            if v is None and k in optional:
                v = NAN if isinstance(getattr(self, k), float) else NO_STEP
            try:
                setattr(self, k, _copy(v))
            except (TypeError, OverflowError) as e:
                raise ConfigError(f"snapshot key {k!r} of {self.name}: {e}") from None


def _args(cls: type) -> tuple[str, ...]:
    """The constructor's argument names: ``ARGS``, or read off ``__init__`` for a Python
    class that does not list them (a compiled class's ``__init__`` has no signature)."""
    args = _ARGS.get(cls)
    if args is None:
        args = getattr(cls, "ARGS", None)
        if args is None:
            args = tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")
        _ARGS[cls] = args = tuple(args)
    return args


def _state(det) -> tuple[tuple[str, ...], Callable[[Any], tuple], tuple[int, ...]]:
    """Names of the learned state (``STATE``), a getter of their values (one C call: the
    store snapshots every busy run) and the indexes of the ``OPTIONAL`` ones, once per class.

    Not ``vars(det)``: a compiled detector has no ``__dict__``, and on CPython 3.11
    ``vars()`` materializes a Python one, making every attribute access of it slower for
    the rest of its life (~15% on ``update()``)."""
    cls = type(det)
    state = _STATE.get(cls)
    if state is None:
        names = getattr(cls, "STATE", None)
        if names is None:   # a Python subclass that does not list its state: its fields
            names = tuple(k for k in vars(det.clone())
                          if k.startswith("_") and not k.startswith("_c_"))
        names = tuple(names)
        one = operator.attrgetter(*names) if names else None
        getter = (one if len(names) > 1 else (lambda o: (one(o),)) if names else (lambda o: ()))
        optional = getattr(cls, "OPTIONAL", ())
        state = _STATE[cls] = (names, getter, tuple(i for i, n in enumerate(names) if n in optional))
    return state


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
