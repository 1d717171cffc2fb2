"""`overfit`: validation loss rising while the training loss still falls.

``update_train`` keeps ``train``, an EWMA of the training loss (half-life ``halflife``
steps). ``update`` takes each validation loss. The validation loss is judged as the mean
of its last ``span`` evals (``val_mean``), against the lowest such mean so far
(``best_val``): one lucky eval does not set the bar, and one unlucky eval does not
clear it. Once ``min_evals`` evals are in, the finding is active when that mean has
stood above its best by more than a margin for the last ``patience`` evals in a row,
while ``train`` has fallen since that best by more than ``train_drop`` of the training
loss's own progress. The margin is the larger of ``rise`` x the validation loss's
progress (first eval minus best) and ``noise_z`` x its own eval-to-eval scatter (an
EWMA of absolute second differences, so that a steady trend is not counted as scatter,
as a standard deviation of one eval): differences of losses only, so an offset or a
scale of the loss changes nothing. A material rise pages sooner: the last 2 evals each
above the lowest eval by more than ``quick`` (2) margins, from the 8th eval (the scatter
measured), while the training loss falls (a clean eval loss of the shared logs comes to
0.44 of that bar; the V below pages 3 evals after its minimum). An eval loss that only
wobbles (a Whisper
fine-tune's 0.21-0.27 with no trend; a 7B fine-tune's 1.576 against its best 1.552, a
1.5% rise inside its own scatter) is no overfit.

>>> det = OverfitDetector()
>>> hit = None
>>> for s in range(1, 20001):
...     det.update_train(s, 3.0 - s / 20000)
...     if s % 500 == 0 and det.update(s, 2.5 + abs(s - 10000) / 10000).active:
...         hit = hit or s
>>> hit
11500
"""

from __future__ import annotations

import math
from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

if not cython.compiled:       # compiled: libc's, cimported in overfit.pxd
    from math import isfinite

from . import base
from .base import Detector, check, decay, fraction, positive, register
from .finding import Verdict

INF = cython.declare(cython.double, math.inf)
NAN = cython.declare(cython.double, base.NAN)              # a float state with no value yet
NO_STEP = cython.declare(cython.longlong, base.NO_STEP)    # a step state with no step yet
_new = tuple.__new__     # a state without the NamedTuple's Python-level __new__
QUICK_EVALS = 8          # evals before the quick path: the scatter from 6 second differences


class OverfitState(NamedTuple):
    step: int
    active: bool
    val: float
    best_val: float        # the lowest mean of ``span`` evals so far
    train: float | None
    val_mean: float = math.nan    # the mean of the last ``span`` evals
    margin: float = 0.0           # how far above best_val the mean must stand
    above: int = 0                # evals in a row it has
    quick: bool = False           # active by the material rise of the last 2 evals


@cython.cclass
class OverfitDetector(Detector):
    """Fields typed in overfit.pxd. `observe` is `update` without a state: its last
    call's values are attributes named like `OverfitState`'s fields (``train`` is NaN
    where the state has None)."""

    name = "overfit"
    FEED, KIND = "level", "overfit"    # the training loss; the evals come by `observe`

    def see(self, p) -> None:
        self._update_train(p.s, p.x)

    def verdict(self) -> Verdict:
        """The validation loss above its best while the training loss falls (warning)."""
        return Verdict("overfit", self.active, "warning", self.val_mean - self.best_val,
                       facts={"val_mean": self.val_mean, "best_val": self.best_val,
                              "margin": self.margin, "above": self.above, "span": self.span,
                              "quick": self.quick_hit})
    ARGS = ("rise", "train_drop", "patience", "min_evals", "halflife", "noise_z", "span", "quick")
    STATE = ("_vfirst", "_vprev", "_vnoise", "_tfirst", "_train", "_tstep", "_best",
             "_train_at_best", "_evals", "_above", "_vmin")
    OPTIONAL = ("_vfirst", "_tfirst", "_train", "_tstep", "_train_at_best")

    def __init__(self, *, rise: float = 0.05, train_drop: float = 0.005, patience: int = 3,
                 min_evals: int = 3, halflife: float = 50.0, noise_z: float = 4.0,
                 span: int = 4, quick: float = 2.0) -> None:
        fraction("rise", rise)
        fraction("train_drop", train_drop)
        check(isinstance(quick, (int, float)) and quick >= 0, "quick", quick,
              "a number of margins >= 0 (0: off)")
        self.quick = quick
        positive("noise_z", noise_z)
        self.noise_z = noise_z
        self._vfirst = NAN       # the first validation loss
        self._vprev = []         # the last max(span, 2) validation losses
        self._vnoise = 0.0       # EWMA of |second difference| between evals
        self._tfirst = NAN       # the first training level
        for n in ("patience", "min_evals", "span"):
            check(isinstance(locals()[n], int) and locals()[n] >= 1, n, locals()[n], "an int >= 1 (evals)")
        positive("halflife", halflife)
        self.rise, self.train_drop, self.patience = rise, train_drop, patience
        self.min_evals, self.halflife, self.span = min_evals, halflife, span
        self._c_halflife = halflife                      # the same, typed
        self._c_train = 0.5 ** (1.0 / halflife)          # per-step EWMA weight (a constant)
        self._train = NAN
        self._tstep = NO_STEP
        self._best = INF
        self._train_at_best = NAN
        self._evals = 0
        self._above = 0
        self._vmin = INF         # the lowest single eval
        self.step, self.active, self.val, self.best_val, self.train = 0, False, NAN, INF, NAN
        self.val_mean, self.margin, self.above, self.quick_hit = NAN, 0.0, 0, False

    def update_train(self, step: int, loss: float) -> None:
        self._update_train(step, loss)

    @cython.locals(dt=cython.longlong, g=cython.double)
    def _update_train(self, step: int, loss: float) -> int:
        if not isfinite(loss):
            return 0
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
                                   None if self.train != self.train else self.train,
                                   self.val_mean, self.margin, self.above, self.quick_hit))

    @cython.locals(d=cython.double, margin=cython.double, t0=cython.double, t=cython.double,
                   tf=cython.double, falling=cython.bint, mean=cython.double, n=cython.Py_ssize_t,
                   quick=cython.bint, k=cython.longlong, prev=list)
    def observe(self, step: int, val: float) -> bool:
        """`update` without building a state: returns ``active``."""
        self.step, self.val = step, val
        if not isfinite(val):
            self.active, self.best_val, self.train = False, self._best, self._train
            return False
        self._evals += 1
        if self._vfirst != self._vfirst:
            self._vfirst = val
        prev = self._vprev
        if len(prev) >= 2:
            d = abs(val - 2 * prev[-1] + prev[-2]) * 0.5117   # -> sd (1.2533/sqrt 6)
            k = self._evals - 2       # second differences so far: a mean, then an EWMA
            self._vnoise += (1.0 / k if k < 30 else 0.033) * (d - self._vnoise)
        prev.append(val)
        n = max(self.span, 2)
        if len(prev) > n:
            del prev[0]
        n = min(len(prev), self.span)
        mean = sum(prev[-n:]) / n
        margin = max(self.rise * max(self._vfirst - self._best, 0.0), self.noise_z * self._vnoise)
        if n < self.span or mean < self._best:
            if mean < self._best:
                self._best, self._train_at_best = mean, self._train
            self._above = 0
        elif mean > self._best + margin:
            self._above += 1
        else:
            self._above = 0
        t0, t, tf = self._train_at_best, self._train, self._tfirst
        if tf != tf:               # restored from a snapshot of before 2026-12-03
            tf = self._tfirst = t
        falling = (t0 == t0 and t == t
                   and t0 - t > self.train_drop * max(tf - t0, 0.0) and t < t0)
        # the quick path once the scatter is measured (6 second differences and more)
        quick = (self.quick > 0 and margin > 0 and self._evals >= QUICK_EVALS
                 and min(prev[-1], prev[-2]) > self._vmin + self.quick * margin)
        if val < self._vmin:
            self._vmin = val
        self.active = (self._evals >= self.min_evals and falling
                       and (self._above >= self.patience or quick))
        self.quick_hit = quick and self._above < self.patience
        self.best_val, self.train = self._best, t
        self.val_mean, self.margin, self.above = mean, margin, self._above
        return self.active


register(OverfitDetector)
