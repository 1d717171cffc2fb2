"""A log of a smoothed loss, recognised from the whole log and judged on the points its
smoothing left apart.

Many trainers print a loss that is already smoothed: fastai's recorder keeps an EMA
(beta 0.98), a Keras callback's per-batch ``logs["loss"]`` is the running mean since the
epoch began, a progress bar shows the mean of the last 20 batches. The detectors read a
log's noise from the scatter between neighbouring points. A smoothed log has a few
hundredths of the batch noise there, while its level wanders as much as the raw log's,
so a healthy run pages (`tests/bench/smoothed_logs.py`).

**How it is recognised.** In each of 2 to 4 stretches of the log (each of at least
`WINDOW` points), the third difference of ``K``-point means, scaled to one point
(``sqrt(K / 20)``, the factor that makes it the points' sd when they are independent),
is compared at ``K`` = 16 and 1. For independent points the two agree; a smoothed log's
16-point means scatter far more than its neighbours differ, and a smoothing is the
log's, so it shows in every stretch. A failure that takes over the end of a raw log
(an lr blow-up, whose growth the 16-point means read as their scatter) shows in its own
stretch only. The ratio is the least of the stretches':

- the 107 logs of the shared corpus (raw, or a mean over each logging interval) reach
  2.16 (`RATIO` is 5.5: 2.5x above; `tests/test_smoothed.py`), and the harness's 1,492
  failures injected into its clean logs 2.04 (an lr blow-up over the second half of a
  1,200-point log read 44 over that half alone);
- smoothed healthy runs of 20,000 points reach 5.5 (a mean of the last 5), 7.7-8.0 (an
  EMA of beta 0.9) and 9.9-13.7 (fastai's EMA, a mean of the last 20, Keras' running
  epoch mean); of 1,000 points, where a stretch is 500, 2.4-14.

**How it is judged.** One point in ``every``: the smallest block length at which the
scaled scatter of the means reaches half its largest value, where the smoothing has let
go. The points kept are nearly independent, as a log of the mean over each logging
interval is. Every non-finite loss, the last loss and every eval are kept.

The daemon cannot do this: it judges a stream as it comes, and early in a run a descent
looks like a smoothing. ``wtwin monitor --every N`` sets the choice by hand (1: every
point).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

RATIO = 5.5        # the scaled scatter of 16-point means over one point's: above, smoothed
PROBE = 16         # the block length of that test
MIN_DIFFS = 20     # third differences a block length needs in a stretch to be read
WINDOW = PROBE * (MIN_DIFFS + 3)   # the shortest stretch the probe reads: 368 points
MAX_WINDOWS = 4    # the log is read in 2 to 4 stretches, each of at least WINDOW points
TREND = 0.2        # a share of positive third differences below this (or above 1 - it): a trend


class Smoothing(NamedTuple):
    every: int            # judge one loss point in this many (1: the log is not smoothed)
    ratio: float          # the scaled scatter of 16-point means over one point's (NaN: unread)


def _scatter(h: np.ndarray, k: int) -> tuple[float, float]:
    """(the sd of one point, read from the third differences of ``k``-point means; the
    share of them that is positive), NaN for a block length with too few of them."""
    n = len(h) // k
    if n < MIN_DIFFS + 3:
        return math.nan, math.nan
    m = h[:n * k].reshape(n, k).mean(axis=1)
    d = m[3:] - 3.0 * m[2:-1] + 3.0 * m[1:-2] - m[:-3]
    return float(np.median(np.abs(d))) / 0.6745 * math.sqrt(k / 20.0), float(np.mean(d > 0))


def smoothing(losses) -> Smoothing:
    """How a log of these loss values (in log order; None and non-finite ones are skipped)
    is judged (`Smoothing`)."""
    x = np.asarray(losses, dtype=float)          # None is NaN
    x = x[np.isfinite(x)]
    windows = min(len(x) // WINDOW, MAX_WINDOWS)
    if windows < 2:
        return Smoothing(1, math.nan)
    each = [_ratio(w) for w in np.array_split(x[:len(x) // windows * windows], windows)]
    ratio = min((r for r in each if r == r), default=math.nan)
    if not (ratio > RATIO and all(r == r for r in each)):   # somewhere independent, or unread
        return Smoothing(1, ratio)
    h = x[len(x) // 2:]
    read, k = [], 1
    while True:
        s, _ = _scatter(h, k)
        if s != s:
            break
        read.append((k, s))
        k *= 2
    top = max(s for _, s in read)
    return Smoothing(next(k for k, s in read if s >= 0.5 * top), ratio)


def _ratio(w: np.ndarray) -> float:
    """The scaled scatter of ``PROBE``-point means over one point's in the stretch ``w``;
    NaN where it holds no noise to read (one point's scatter at the float's floor, or
    third differences of one sign: a trend)."""
    one, _ = _scatter(w, 1)
    probe, pos = _scatter(w, PROBE)
    if not (one > 1e-9 * float(np.median(np.abs(w))) and probe == probe
            and TREND <= pos <= 1.0 - TREND):
        return math.nan
    return probe / one if one > 0.0 else math.nan


class Thinned:
    """``log`` with one loss point in ``every`` (the last of each ``every``), every
    non-finite loss, the last loss and every eval; everything else reads through."""

    def __init__(self, log, every: int) -> None:
        self._log, self.every = log, every

    def __getattr__(self, name):
        return getattr(self._log, name)

    def events(self, *args, **kwargs):
        every, last = self.every, self._log.n_loss - 1
        i = -1
        for e in self._log.events(*args, **kwargs):
            if e[0] == "loss":
                i += 1
                v = e[2]
                if i % every != every - 1 and i != last and math.isfinite(v):
                    continue
            yield e


def judged(log, every: int | None) -> tuple[object, dict | None]:
    """(``log`` as it is judged, what ``--json`` says of its smoothing: None for a log
    judged on every point that does not look smoothed). ``every``: ``--every``, None to
    choose from the log."""
    found = smoothing(log.records.loss)
    n = every if every is not None else found.every
    if n <= 1 and found.every <= 1:
        return log, None
    info = {"every": n, "ratio": None if found.ratio != found.ratio else round(found.ratio, 2),
            "found": found.every, "points": log.n_loss}
    return (Thinned(log, n) if n > 1 else log), info


def note(info: dict) -> str:
    """The human output's line on a smoothed log (or one ``--every`` thinned)."""
    seen = (f"the loss looks smoothed, an EMA or a running mean (its 16-point means scatter "
            f"{info['ratio']:g}x what neighbouring points differ by; over {RATIO:g} is "
            f"smoothed)" if info["found"] > 1 else "")
    if info["every"] <= 1:
        return f"{seen}; judged on every point, as --every 1 asks: a healthy run may page"
    if not seen:
        return f"judged on one loss point in {info['every']} of {info['points']} (--every)"
    return (f"{seen}; judged on one point in {info['every']}, where its smoothing lets go "
            f"(--every 1: every point). Send the raw loss, or each logging interval's mean, "
            f"to have every point judged")
