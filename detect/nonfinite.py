"""`nonfinite`: the obvious failures, flagged at once, warm-up or not.

- ``loss``: a NaN or infinite loss (critical).
- ``stuck``: a loss of exactly 0.0, or exactly the previous point's value, logged with a
  non-finite grad norm: the weights are NaN and the logger hides it (Hugging Face
  Trainer's NaN filter logs ``loss: 0.0``, ``grad_norm: nan``) (critical).
- ``grad``: the grad norm non-finite on ``grad_run`` logged steps in a row (critical).
  At the start of a run, before any finite norm, an fp16 loss scaler searching its scale
  skips steps in a row: there up to ``start_run`` are tolerated. One non-finite norm
  (an overflow the scaler skipped) is ``grad_bad`` only: info, never a page.
- ``blown``: a finite loss more than ``blowup`` times the largest magnitude of the run's
  first ``ref_points`` points (0.06 then 2e8: orders of magnitude, no warm-up needed).
  Scale invariant; an offset only makes it quieter. Such a point is kept out of the
  reference and out of the other detectors (`RunMonitor`), like a NaN.

``observe(step, loss, grad)``: ``grad`` None when the event has no grad norm (the run of
non-finite norms is then neither extended nor broken).

>>> det = NonfiniteDetector()
>>> [det.update(t, v).active for t, v in enumerate([2.0, 1.9, float("nan"), 1.8])]
[False, False, True, False]
>>> det = NonfiniteDetector()
>>> nan = float("nan")
>>> [(det.observe(t, v, g), det.reason)[1] for t, v, g in
...  [(10, 2.0, 1.0), (20, 1.9, float("inf")), (30, 1.8, 1.1), (40, 0.0, nan), (50, 0.0, nan)]]
['', '', '', 'stuck', 'stuck']
>>> det.grad_bad, det.grad_count, det.grad_since
(True, 2, 40)
>>> det = NonfiniteDetector()
>>> [(det.observe(t, v), det.reason)[1] for t, v in [(1, 0.06), (2, 2e8), (3, 0.05)]]
['', 'blown', '']
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (nonfinite.pxd)
    from math import isfinite

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)

_new = tuple.__new__     # a NonfiniteState without the NamedTuple's Python-level __new__


class NonfiniteState(NamedTuple):
    step: int
    active: bool        # a critical obvious failure at this point
    count: int          # non-finite losses seen so far
    first_step: int | None
    reason: str = ""    # "loss", "stuck", "grad", "blown" or ""


@cython.cclass
class NonfiniteDetector(Detector):
    """``observe`` leaves ``active`` (critical), ``blown``, ``grad_bad`` (this point's grad
    norm is not finite), ``reason``, ``count``, ``first_step``, ``grad_count`` (non-finite
    norms in a row) and ``grad_since`` (the first step of that run)."""

    name = "nonfinite"
    FEED, KIND = "first", "nonfinite"

    def see(self, p) -> None:
        self._observe(p.s, p.x, p.grad)

    def verdict(self) -> Verdict:
        """A non-finite loss, a loss frozen under non-finite grad norms (critical), a
        grad norm not finite (info), or a loss that blew up (``facts["blown"]``)."""
        return Verdict("nonfinite", self.active or self.grad_bad,
                       "critical" if self.active else "info", facts={
                           "reason": self.reason, "blown": self.blown})

    def blown_message(self, step: int, loss: float) -> str:
        """The page of a loss that blew up (``blown``): against the run's first points."""
        return (f"loss {loss:.4g} is {abs(loss) / self._ref:.3g} times the largest loss of the "
                f"run's first {self._n_ref} points ({self._ref:.4g}): it blew up")

    def message(self, step: int, loss: float) -> str:
        """The page of a `nonfinite` verdict (``reason``), or the info of one bad grad norm."""
        r = self.reason
        if r == "loss":
            return f"loss is {loss} at step {step} (first non-finite at step {self.first_step})"
        since = self.grad_since
        if r == "stuck":
            what = "exactly 0.0" if loss == 0.0 else f"frozen at {loss!r}"
            return (f"loss is {what} at step {step} while the grad norm is not finite (since step "
                    f"{since}): the weights are probably NaN and the logger hides it")
        if r == "grad":
            return (f"grad norm not finite on {self.grad_count} logged steps in a row since step "
                    f"{since}: the optimizer is not updating (or the weights are NaN)")
        return (f"grad norm not finite at step {step} (one step: an fp16 loss scaler skipping an "
                "overflow does this; it pages if it repeats)")
    ARGS = ("blowup", "ref_points", "grad_run", "start_run")
    STATE = ("_count", "_first", "_ref", "_n_ref", "_prev", "_grun", "_gfirst", "_gseen")
    OPTIONAL = ("_first", "_ref", "_prev", "_gfirst")

    def __init__(self, *, blowup: float = 1000.0, ref_points: int = 5, grad_run: int = 2,
                 start_run: int = 16) -> None:
        check(blowup > 1.0, "blowup", blowup, "> 1 (a factor over the run's first magnitude)")
        for n, v in (("ref_points", ref_points), ("grad_run", grad_run), ("start_run", start_run)):
            check(isinstance(v, int) and v >= 1, n, v, "an int >= 1 (points)")
        self.blowup, self.ref_points, self.grad_run, self.start_run = (
            blowup, ref_points, grad_run, start_run)
        self._c_blowup = blowup
        self._c_ref_points, self._c_grad_run, self._c_start_run = ref_points, grad_run, start_run
        self._count = 0
        self._first = NO_STEP
        self._ref = NAN           # largest |loss| of the first ref_points finite points
        self._n_ref = 0
        self._prev = NAN          # the previous finite loss
        self._grun = 0            # non-finite grad norms in a row
        self._gfirst = NO_STEP    # the step that run began
        self._gseen = False       # a finite grad norm was seen
        self.active = self.blown = self.grad_bad = False
        self.reason = ""

    def observe(self, step: int, loss: float, grad=None) -> None:
        self._observe(step, loss, grad)

    @cython.locals(bad=cython.bint, a=cython.double, g=cython.double, need=cython.longlong)
    def _observe(self, step: int, loss: float, grad) -> int:
        self.grad_bad = False
        if grad is not None:
            g = grad
            if isfinite(g):
                self._grun, self._gseen = 0, True
            else:
                if self._grun == 0:
                    self._gfirst = step
                self._grun += 1
                self.grad_bad = True
        self.blown = False
        reason = ""
        bad = not isfinite(loss)
        if bad:
            self._count += 1
            if self._first == NO_STEP:
                self._first = step
            reason = "loss"
        else:
            a = abs(loss)
            if self.grad_bad and (loss == 0.0 or loss == self._prev):
                reason = "stuck"
            elif self._ref > 0.0 and a > self._c_blowup * self._ref:
                self.blown, reason = True, "blown"
            elif self._n_ref < self._c_ref_points:
                self._n_ref += 1
                if not (self._ref >= a):      # NaN (no point yet) or smaller
                    self._ref = a
            self._prev = loss
        need = self._c_grad_run if self._gseen else self._c_start_run + 1
        if not reason and self._grun >= need:
            reason = "grad"
        self.reason = reason
        self.active = reason != "" and not self.blown

    @property
    def count(self) -> int:
        return self._count

    @property
    def first_step(self) -> int | None:
        return None if self._first == NO_STEP else self._first

    @property
    def grad_count(self) -> int:
        return self._grun

    @property
    def grad_since(self) -> int | None:
        return None if self._gfirst == NO_STEP or not self._grun else self._gfirst

    def update(self, step: int, loss: float, grad=None) -> NonfiniteState:
        self.observe(step, loss, grad)
        return _new(NonfiniteState, (step, self.active, self._count, self.first_step,
                                     self.reason))


register(NonfiniteDetector)
