"""`overfit`: validation loss rising while the training loss still falls.

``update_train`` keeps ``train``, an EWMA of the training loss (half-life ``halflife``
steps). ``update`` takes each validation loss: once ``min_evals`` evals are in, the
finding is active when the last ``patience`` evals are all above the best validation
loss by more than a margin, while ``train`` has fallen since that best eval by more
than ``train_drop`` of the training loss's own progress. The margin is the larger of
``rise`` x the validation loss's progress (first eval minus best) and ``noise_z`` x its
own eval-to-eval scatter (an EWMA of absolute second differences, so that a steady
trend is not counted as scatter, as a standard deviation): differences of losses only, so
an offset or a scale of the loss changes nothing, and an eval loss that only wobbles
(a Whisper fine-tune's 0.21-0.27 with no trend) is no overfit.

>>> det = OverfitDetector()
>>> hit = None
>>> for s in range(1, 20001):
...     det.update_train(s, 3.0 - s / 20000)
...     if s % 500 == 0 and det.update(s, 2.5 + abs(s - 10000) / 10000).active:
...         hit = hit or s
>>> hit
11000
"""

from __future__ import annotations

import math
from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (detect/_cython_shim.py)
    from . import _cython_shim as cython

if not cython.compiled:       # compiled: libc's, cimported in overfit.pxd
    from math import isfinite

from . import base
from .base import Detector, check, decay, fraction, positive, register

INF = cython.declare(cython.double, math.inf)
NAN = cython.declare(cython.double, base.NAN)              # a float state with no value yet
NO_STEP = cython.declare(cython.longlong, base.NO_STEP)    # a step state with no step yet
_new = tuple.__new__     # a state without the NamedTuple's Python-level __new__


class OverfitState(NamedTuple):
    step: int
    active: bool
    val: float
    best_val: float
    train: float | None


@cython.cclass
class OverfitDetector(Detector):
    """Fields typed in overfit.pxd. `observe` is `update` without a state: its last
    call's values are attributes named like `OverfitState`'s fields (``train`` is NaN
    where the state has None)."""

    name = "overfit"
    ARGS = ("rise", "train_drop", "patience", "min_evals", "halflife", "noise_z")
    STATE = ("_vfirst", "_vprev", "_vnoise", "_tfirst", "_train", "_tstep", "_best",
             "_train_at_best", "_evals", "_above")
    OPTIONAL = ("_vfirst", "_tfirst", "_train", "_tstep", "_train_at_best")

    def __init__(self, *, rise: float = 0.05, train_drop: float = 0.005, patience: int = 2,
                 min_evals: int = 3, halflife: float = 50.0, noise_z: float = 3.0) -> None:
        fraction("rise", rise)
        fraction("train_drop", train_drop)
        positive("noise_z", noise_z)
        self.noise_z = noise_z
        self._vfirst = NAN       # the first validation loss
        self._vprev = []         # the last two validation losses
        self._vnoise = 0.0       # EWMA of |second difference| between evals
        self._tfirst = NAN       # the first training level
        for n in ("patience", "min_evals"):
            check(isinstance(locals()[n], int) and locals()[n] >= 1, n, locals()[n], "an int >= 1 (evals)")
        positive("halflife", halflife)
        self.rise, self.train_drop, self.patience = rise, train_drop, patience
        self.min_evals, self.halflife = min_evals, halflife
        self._c_halflife = halflife                      # the same, typed
        self._c_train = 0.5 ** (1.0 / halflife)          # per-step EWMA weight (a constant)
        self._train = NAN
        self._tstep = NO_STEP
        self._best = INF
        self._train_at_best = NAN
        self._evals = 0
        self._above = 0
        self.step, self.active, self.val, self.best_val, self.train = 0, False, NAN, INF, NAN

    @cython.locals(dt=cython.longlong, g=cython.double)
    def update_train(self, step: int, loss: float) -> None:
        if not isfinite(loss):
            return
        if self._tstep == NO_STEP:
            self._train, self._tstep, self._tfirst = loss, step, loss
        dt = step - self._tstep
        g = self._c_train if dt == 1 else decay(dt, self._c_halflife)
        self._tstep = step
        self._train = g * self._train + (1 - g) * loss

    def update(self, step: int, val: float) -> OverfitState:
        self.observe(step, val)
        return self.state()

    def state(self) -> OverfitState:
        """The last `observe` as a state (what `update` returns)."""
        return _new(OverfitState, (self.step, self.active, self.val, self.best_val,
                                   None if self.train != self.train else self.train))

    @cython.locals(d=cython.double, margin=cython.double, t0=cython.double, t=cython.double,
                   tf=cython.double, falling=cython.bint)
    def observe(self, step: int, val: float) -> bool:
        """`update` without building a state: returns ``active``."""
        self.step, self.val = step, val
        if not isfinite(val):
            self.active, self.best_val, self.train = False, self._best, self._train
            return False
        self._evals += 1
        if self._vfirst != self._vfirst:
            self._vfirst = val
        if len(self._vprev) == 2:
            d = abs(val - 2 * self._vprev[1] + self._vprev[0]) * 0.5117   # -> sd (1.2533/sqrt 6)
            self._vnoise = d if self._vnoise == 0.0 else self._vnoise + 0.3 * (d - self._vnoise)
        self._vprev = self._vprev[-1:] + [val]
        margin = max(self.rise * max(self._vfirst - self._best, 0.0), self.noise_z * self._vnoise)
        if val < self._best:
            self._best, self._train_at_best, self._above = val, self._train, 0
        elif val > self._best + margin:
            self._above += 1
        else:
            self._above = 0
        t0, t, tf = self._train_at_best, self._train, self._tfirst
        if tf != tf:               # restored from a snapshot of before 2026-12-03
            tf = self._tfirst = t
        falling = (t0 == t0 and t == t
                   and t0 - t > self.train_drop * max(tf - t0, 0.0) and t < t0)
        self.active = self._evals >= self.min_evals and self._above >= self.patience and falling
        self.best_val, self.train = self._best, t
        return self.active


register(OverfitDetector)
