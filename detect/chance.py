"""`chance`: the loss sits at the loss of a uniform guess: the model predicts nothing.

A cross-entropy over ``V`` classes (a vocabulary's tokens, a classifier's labels) that
predicts every class alike is exactly ``ln V``: 10.3735 for a 32,000-token vocabulary.
A loss that sits there is a model that stopped predicting: a QLoRA fine-tune at lr 5 froze
at 10.3735 from its second log, and nothing else in the detectors sees it (it is flat,
finite, and not above where it started). Only the trainer knows ``V``: it sends
``chance=`` (the loss at chance) or ``vocab_size``/``num_labels`` in its run's config
(`chance_of`; the Hugging Face callback sends ``classes``, from the model's class:
`wtwin.emitters.model_classes`), and ``wtwin monitor`` reads them from ``--chance``/``--classes`` or the
model's ``config.json`` beside a ``trainer_state.json``. Without it the detector is idle.

Active when ``points`` points in a row (at increasing steps) lie within ``tolerance`` of
the chance level, as a fraction of it (0.1% of 10.37: 0.01): a model at its random
initialization starts there too, but a learning one leaves the band within a point or
two, and one that fell back there from below (collapsed to uniform after a blow-up) is
the same failure. Critical: the run has stopped learning anything.

>>> det = ChanceDetector(level=chance_of({"vocab_size": 32000}))
>>> [det.update(s, x).active for s, x in enumerate([10.9, 10.3735, 10.3735, 10.3736], 1)]
[False, False, True, True]
>>> ChanceDetector().update(1, 10.3735).active     # no chance level known: idle
False
"""

from __future__ import annotations

import math
from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from .base import NO_STEP as _NO_STEP, Detector, check, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
# what a trainer's config may call the number of classes a cross-entropy is over ("classes"
# first: what the callbacks send, from the model's class)
CLASS_KEYS = ("classes", "vocab_size", "num_labels", "vocab")


def chance_of(config) -> float:
    """The loss at chance from a run's config: ``chance`` as given, else ``ln`` of the
    first of `CLASS_KEYS` that is an int >= 2; 0.0 when none is (unknown)."""
    if not isinstance(config, dict):
        return 0.0
    given = config.get("chance")
    if isinstance(given, (int, float)) and not isinstance(given, bool) and math.isfinite(given) \
            and given > 0:
        return float(given)
    for key in CLASS_KEYS:
        v = config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 2:
            return math.log(v)
    return 0.0


class ChanceState(NamedTuple):
    step: int
    active: bool
    at: int         # points in a row at chance


@cython.cclass
class ChanceDetector(Detector):
    """``level`` the loss at chance (0.0: unknown, idle)."""

    name = "chance"
    FEED, KIND = "level", "chance"
    ARGS = ("level", "tolerance", "points")
    STATE = ("_last", "_at")

    def __init__(self, *, level: float = 0.0, tolerance: float = 0.001, points: int = 2) -> None:
        check(isinstance(level, (int, float)) and math.isfinite(level) and level >= 0, "level",
              level, "a loss >= 0 (0: unknown)")
        check(0 < tolerance < 0.1, "tolerance", tolerance, "a fraction in (0, 0.1)")
        check(isinstance(points, int) and points >= 1, "points", points, "an int >= 1")
        self.level, self.tolerance, self.points = float(level), float(tolerance), points
        self._c_band = float(level) * tolerance
        self._c_points = points
        self._last = NO_STEP
        self._at = 0
        self.active = False

    def see(self, p) -> None:
        self._observe(p.s, p.x)

    def asks(self) -> bool:
        return self.active

    def verdict(self) -> Verdict:
        """The loss sits at the chance level (critical)."""
        return Verdict("chance", self.active, "critical", facts={"level": self.level,
                                                                "points": self._at})

    def message(self, step: int, loss: float) -> str:
        return (f"the model predicts uniformly: loss {loss:.6g} has sat at chance "
                f"({self.level:.6g}{self._classes()}) for the last {self._at} points; check "
                "the lr and the labels")

    def _classes(self) -> str:
        n = math.exp(self.level)
        return f" = ln {round(n)}" if abs(n - round(n)) < 1e-6 * n else ""

    def observe(self, step: int, loss: float) -> None:
        self._observe(step, loss)

    def _observe(self, step: int, loss: float) -> int:
        if step <= self._last:
            return 0
        self._last = step
        if self._c_band <= 0.0:
            return 0
        self._at = self._at + 1 if abs(loss - self.level) <= self._c_band else 0
        self.active = self._at >= self._c_points

    def update(self, step: int, loss: float) -> ChanceState:
        self.observe(step, loss)
        return ChanceState(step, self.active, self._at)


register(ChanceDetector)
