"""`frozen_loader`: the loss's batch-to-batch scatter collapses while it falls (a frozen data loader).

When a data loader hands the same batch over and over, the model memorizes it: the loss
falls below its course, smoothly, and the point-to-point scatter that different batches
give a healthy run's loss collapses by orders of magnitude within a few dozen steps (an
MLP on load_digits, batch 32: from about 0.05 to 0.0005). A healthy run's scatter shrinks
too, but slowly: over the shared real logs and our own runs, thinned, gapped, resumed and
logged twice, the fast average of it never fell below 1/17 of the slow one; the default
``ratio`` is that with a factor 8 of margin (docs/DETECTION.md, "Obvious failures").

It works on ``u = ln|second difference of the loss|`` (the trend of a falling loss
removed; invariant to the loss's scale and offset): ``fast`` an EWMA of ``u`` (half-life ``fast_halflife`` points), ``slow`` one with
half-life ``slow_halflife``, and the same two EWMAs of the loss itself. After ``warmup``
points the detector is ``active`` when ``fast - slow < ln(ratio)`` and the fast level is
below the slow one (the loss falls), and the slow scatter was noise (its second
differences changed sign in over 30% of the points: a noiseless curve's never do, and its
shrinking curvature is no collapse). While active the slow averages are held, so a loader
that stays frozen keeps it active and one that recovers clears it. A point at the same
step as the previous one (a log written twice) and a loss exactly equal to the previous
one (a frozen logger: `plateau`'s ``frozen`` rule) do not count. In a rounded log
(`resolution`), a second difference under half a printed digit counts as half a digit,
with no sign, in the fast average only (the usual scatter is what the print shows): the
print cannot show less (what it held was the binary residue of the
decimals, 1e-9 and below, which made a noiseless power law printed at 5 decimals look
like a collapse). A loss that memorizes one batch still collapses, from a hundred
digits to under one within a few dozen points (our own runs, printed at 4 decimals as
Hugging Face's Trainer prints them); a healthy one shrinks to the print's floor slowly.

>>> import random
>>> rng = random.Random(0)
>>> det = FrozenLoaderDetector()
>>> first = None
>>> for t in range(1, 601):
...     fresh = rng.gauss(0, 0.05) if t <= 400 else -0.2 * (1 - 0.99 ** (t - 400))
...     if det.update(t, 0.3 + t ** -0.5 + fresh).active and first is None:
...         first = t
>>> first
421
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (collapse.pxd)
    from math import exp, isfinite, log

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, positive, register
from .finding import Verdict
from .resolution import NONE, RAW as _RAW, decimals, quantum

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
# the scatter was noise: its second differences changed sign this often (white noise: ~0.77;
# a noiseless curve, whose "scatter" is its own curvature shrinking: 0)
_NOISY = cython.declare(cython.double, 0.3)
RAW = cython.declare(cython.longlong, _RAW)

_new = tuple.__new__     # a FrozenLoaderState without the NamedTuple's Python-level __new__


class FrozenLoaderState(NamedTuple):
    step: int
    active: bool
    ratio: float          # the fast scatter over the slow one (1.0 before the warm-up ends)


@cython.cclass
class FrozenLoaderDetector(Detector):
    """``observe`` leaves ``active`` and ``scatter`` (the fast scatter over the slow one)."""

    name = "frozen_loader"
    FEED, KIND = "level", "frozen_loader"

    def see(self, p) -> None:
        self._observe(p.s, p.x)

    def asks(self) -> bool:
        return self.active

    def verdict(self) -> Verdict:
        """The loss falls below its course while its scatter collapsed (critical)."""
        return Verdict("frozen_loader", self.active, "critical", facts={"scatter": self.scatter})

    def message(self, step: int, loss: float) -> str:
        return (f"loss {loss:.4g} fell below its course while its batch-to-batch scatter "
                f"collapsed to {self.scatter:.2%} of its usual size: the same batch repeated? "
                "(a frozen data loader)")
    ARGS = ("ratio", "fast_halflife", "slow_halflife", "warmup")
    STATE = ("_last", "_prev", "_dprev", "_fast", "_slow", "_lf", "_ls", "_n", "_on", "_up",
             "_flips", "_dec")
    OPTIONAL = ("_last", "_prev", "_dprev", "_fast", "_slow", "_lf", "_ls")

    def __init__(self, *, ratio: float = 0.007, fast_halflife: float = 10.0,
                 slow_halflife: float = 100.0, warmup: int = 300) -> None:
        for n, v in (("ratio", ratio), ("fast_halflife", fast_halflife),
                     ("slow_halflife", slow_halflife)):
            positive(n, v)
        check(ratio < 1.0, "ratio", ratio, "< 1 (the fast scatter as a fraction of the slow)")
        check(isinstance(warmup, int) and warmup >= 2, "warmup", warmup, "an int >= 2 (points)")
        self.ratio, self.fast_halflife, self.slow_halflife, self.warmup = (
            ratio, fast_halflife, slow_halflife, warmup)
        self._c_log_ratio = log(ratio)
        self._c_fast = 0.5 ** (1.0 / fast_halflife)
        self._c_slow = 0.5 ** (1.0 / slow_halflife)
        self._c_warmup = warmup
        self._last = NO_STEP
        self._prev = self._dprev = NAN
        self._fast = self._slow = self._lf = self._ls = NAN
        self._n = 0
        self._on = self._up = False
        self._flips = 0.0         # EWMA (slow) of "the second difference changed sign"
        self._dec = NONE          # the decimals the log prints (`resolution`)
        self._c_hdec, self._c_half = NONE - 1, 0.0   # cache: half a digit at _c_hdec decimals
        self.active = False

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    @cython.locals(u=cython.double, c=cython.double, k=cython.double, d=cython.double,
                   h=cython.double, flip=cython.bint, under=cython.bint)
    def _observe(self, step: int, loss: float) -> int:
        if step == self._last or not isfinite(loss):
            return 0
        self._last = step
        if self._dec < RAW:
            self._dec = decimals(self._dec, loss)
        if self._prev != self._prev:
            self._prev = self._lf = self._ls = loss
            return 0
        d = loss - self._prev
        if d == 0.0:
            return 0
        self._prev = loss
        if self._dprev != self._dprev:
            self._dprev = d
            return 0
        d, self._dprev = d - self._dprev, d
        h = self._half_digit()
        under = abs(d) < h
        if under:               # under the print: as small as it can show, and no sign
            u, flip = log(h), False
        elif d == 0.0:
            return 0
        else:
            flip = (d > 0.0) != self._up
            self._up = d > 0.0
            u = log(abs(d))
        self._n += 1
        if self._fast != self._fast:
            self._fast = self._slow = u
            self._flips = 0.5
            return 0
        c, k = self._c_fast, self._c_slow
        self._fast = c * self._fast + (1.0 - c) * u
        self._lf = c * self._lf + (1.0 - c) * loss
        if not self._on:
            if not under:       # the usual scatter is what the print shows
                self._slow = k * self._slow + (1.0 - k) * u
            self._ls = k * self._ls + (1.0 - k) * loss
            self._flips = k * self._flips + (1.0 - k) * flip
        self._on = (self._n > self._c_warmup and self._fast - self._slow < self._c_log_ratio
                    and self._lf < self._ls and self._flips > _NOISY)
        self.active = self._on

    def _half_digit(self) -> float:
        """Half a printed digit (`resolution`; 0.0 in a log not rounded): a second
        difference smaller than that is 0, what is left of the decimals in binary. Kept
        for the decimals it was computed at (a power a point, before)."""
        if self._dec != self._c_hdec:
            self._c_hdec = self._dec
            self._c_half = 0.5 * quantum(self._dec) if 0 <= self._dec < RAW else 0.0
        return self._c_half

    @property
    def scatter(self) -> float:
        """The fast scatter over the slow one at the last point (1.0 before two), computed
        when read (a message), not per point."""
        return exp(self._fast - self._slow) if self._fast == self._fast else 1.0

    def update(self, step: int, loss: float) -> FrozenLoaderState:
        self.observe(step, loss)
        return _new(FrozenLoaderState, (step, self._on, self.scatter))


register(FrozenLoaderDetector)
