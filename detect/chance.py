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
the same failure. Critical: the run has stopped learning anything. Once active, the verdict
holds while the loss stays within ``EXIT`` (10) bands of the level: a collapsed model whose
loss wanders by a thousandth around ``ln V`` (and ``ln 50257`` and ``ln 50304``, GPT-2's
vocabulary and its padding, differ by 0.0009) is one page, not a page and a resolve at
every wander out of the band (it flapped six times in 8,000 steps); a model that learns
again leaves by more within a point.

>>> det = ChanceDetector(level=chance_of({"vocab_size": 32000}))
>>> [det.update(s, x).active for s, x in enumerate([10.9, 10.3735, 10.3735, 10.3736], 1)]
[False, False, True, True]

Without ``V`` the detector still knows the common ones (`COMMON_CLASSES`: 10, 100 and
1000 classes, and the vocabularies of the usual tokenizers). A loss that sits within
``guess_tolerance`` (0.01%) of one of their ``ln V`` for ``guess_points`` points in a row
is at chance too. It is stricter than a known ``V``: a learning run crosses those levels
in one point (24 of the 103 shared logs start at or pass through one, never for two
points in a row, `tests/test_chance.py`), and one that starts there with a zeroed head
and an lr still 0 stays two points at most. ``wtwin monitor`` with no ``--classes``
pages the QLoRA case at its fourth point.

>>> ChanceDetector().update(1, 10.3735).active     # no chance level known: the common ones
False
>>> det = ChanceDetector()
>>> [det.update(s, x).active for s, x in enumerate([10.9, 10.3735, 10.3735, 10.3735], 1)]
[False, False, False, True]
>>> det.message(4, 10.3735)[:75]
'the model predicts uniformly: loss 10.3735 has sat at chance (10.3735 = ln '
>>> ChanceDetector(guess_points=0).update(1, 10.3735).active   # guessing off: idle
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
from .recovery import HELD_KINDS

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
NAN = cython.declare(cython.double, math.nan)
EXIT = cython.declare(cython.double, 10.0)    # bands an active verdict may wander within
# what a trainer's config may call the number of classes a cross-entropy is over ("classes"
# first: what the callbacks send, from the model's class)
CLASS_KEYS = ("classes", "vocab_size", "num_labels", "vocab")
# the class counts a loss at chance is guessed from when the run names none: a classifier's
# 10, 100 and 1000 classes (MNIST and CIFAR-10, CIFAR-100, ImageNet), and the vocabularies
# of the usual tokenizers (BERT's 30522, LLaMA's 32000, GPT-2's 50257 and its 50304
# padding, ..., Gemma's 256000). Not 2 or 3: a binary or a three-way loss sits at ln 2 or
# ln 3 for reasons of its own (a GAN's discriminator at equilibrium).
COMMON_CLASSES = (10, 100, 1000, 21128, 30522, 32000, 32128, 32768, 49152, 50257, 50265,
                  50304, 51865, 64000, 65024, 65536, 100277, 100352, 102400, 128000, 128256,
                  151936, 152064, 250002, 250880, 256000, 262144)
_COMMON_LEVELS = tuple(math.log(v) for v in COMMON_CLASSES)
LOWEST = cython.declare(cython.double, 0.99 * _COMMON_LEVELS[0])     # none below: no look-up
HIGHEST = cython.declare(cython.double, 1.01 * _COMMON_LEVELS[-1])


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
    """``level`` the loss at chance (0.0: unknown: a common one is guessed, unless
    ``guess_points`` is 0)."""

    name = "chance"
    FEED, KIND = "level", "chance"
    # a collapse to chance after a blow-up pages `divergence` critical first: the same
    # incident, paged once
    GIVES_WAY = HELD_KINDS
    # ... and once it pages, the spike, plateau and divergence of the collapse are its own
    ABSORBS = True
    ARGS = ("level", "tolerance", "points", "guess_tolerance", "guess_points")
    STATE = ("_last", "_at", "_prev", "_guess", "_n", "_leaving", "_lr_peak")
    OPTIONAL = ("_prev",)

    def __init__(self, *, level: float = 0.0, tolerance: float = 0.001, points: int = 2,
                 guess_tolerance: float = 1e-4, guess_points: int = 3) -> None:
        check(isinstance(level, (int, float)) and math.isfinite(level) and level >= 0, "level",
              level, "a loss >= 0 (0: unknown)")
        check(0 < tolerance < 0.1, "tolerance", tolerance, "a fraction in (0, 0.1)")
        check(isinstance(points, int) and points >= 1, "points", points, "an int >= 1")
        check(0 < guess_tolerance < 0.01, "guess_tolerance", guess_tolerance, "a fraction in (0, 0.01)")
        check(isinstance(guess_points, int) and guess_points >= 0, "guess_points", guess_points,
              "an int >= 0 (0: no guess)")
        self.level, self.tolerance, self.points = float(level), float(tolerance), points
        self.guess_tolerance, self.guess_points = float(guess_tolerance), guess_points
        self._c_band = float(level) * tolerance
        self._c_points = points if level > 0 else guess_points
        self._last = NO_STEP
        self._at = 0
        self._prev = NAN
        self._guess = 0.0     # the common chance level the loss sits at, while it does
        self._n = 0           # points seen
        self._leaving = False  # at chance since the first point, and moving off it
        self._lr_peak = 0.0   # the largest lr sent while at chance since the first point
        self.active = False

    def see(self, p) -> None:
        self._observe(p.s, p.x, p.lr)

    def asks(self) -> bool:
        return self.active

    def verdict(self) -> Verdict:
        """The loss sits at the chance level (critical)."""
        return Verdict("chance", self.active, "critical", facts={"level": self._level(),
                                                                "points": self._at})

    def message(self, step: int, loss: float) -> str:
        level = self._level()
        return (f"the model predicts uniformly: loss {loss:.6g} has sat at chance "
                f"({level:.6g}{self._classes(level)}) for the last {self._at} points; check "
                "the lr and the labels")

    def _level(self) -> float:
        return self.level if self.level > 0 else self._guess

    def _classes(self, level: float) -> str:
        n = math.exp(level)
        if self.level > 0:
            return f" = ln {round(n)}" if abs(n - round(n)) < 1e-6 * n else ""
        return (f" = ln {round(n)}, a uniform guess over {round(n):,} classes: a common "
                "vocabulary or class count; if yours differs, name it: classes=N in the "
                "run's config, or --classes N")

    def observe(self, step: int, loss: float, lr=None) -> None:
        self._observe(step, loss, lr)

    @cython.locals(band=cython.double, prev=cython.double, rising=cython.bint)
    def _observe(self, step: int, loss: float, lr) -> int:
        """A streak at chance since the run's first point whose loss fell at every point,
        or whose lr rose at every point, is a model leaving its initialization under a
        warm-up, not one that sits at chance: the verdict waits until a point does
        neither (a ViT whose zeroed head starts at ln 1000 printed 6.9078, 6.9077,
        6.9075 at its first logs, one every 20 steps, and paged critical at the third)."""
        if step <= self._last:
            return 0
        self._last = step
        self._n += 1
        prev = self._prev
        self._prev = loss
        if self._c_band > 0.0:
            band = self._c_band * EXIT if self._held() else self._c_band
            self._at = self._at + 1 if abs(loss - self.level) <= band else 0
        elif self._c_points > 0:
            self._follow_guess(loss, prev)
        if self._at == self._n:     # at chance since the first point: leaving it?
            rising = lr is not None and lr > self._lr_peak
            if rising:
                self._lr_peak = lr
            self._leaving = ((self._n == 1 or loss < prev or rising)
                             and (self._leaving or self._n <= 2))
        else:                       # never again since the first point: one int test
            self._leaving = False
            if self._n == 1 and lr is not None:
                self._lr_peak = lr    # a guessed streak starts at the second point
        self.active = self._c_points > 0 and self._at >= self._c_points and not self._leaving

    def _held(self) -> bool:
        """Has the streak made the verdict (which then holds within ``EXIT`` bands)?"""
        return self._at >= self._c_points and not self._leaving

    @cython.locals(c=cython.double, band=cython.double)
    def _follow_guess(self, loss: float, prev: float) -> int:
        """The points in a row within ``guess_tolerance`` of one common chance level. A
        streak starts only where two points in a row sit that close together, inside the
        levels' range: the levels are looked up on a loss that repeats, not on every point."""
        band = self.guess_tolerance
        if self._at:
            if abs(loss - self._guess) <= band * self._guess * (EXIT if self._held() else 1.0):
                self._at += 1
                return 0
            self._guess, self._at = 0.0, 0
        if not (abs(loss - prev) <= 2.0 * band * loss and LOWEST < loss < HIGHEST):
            return 0
        for c in _COMMON_LEVELS:
            if abs(loss - c) <= band * c and abs(prev - c) <= band * c:
                self._guess, self._at = c, 2
                return 0
        return 0

    def update(self, step: int, loss: float, lr=None) -> ChanceState:
        self.observe(step, loss, lr)
        return ChanceState(step, self.active, self._at)


register(ChanceDetector)
