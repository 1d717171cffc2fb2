"""Bounded, decimated per-run series for plotting: log-spaced past, full-resolution recent.

A run can be millions of steps long; the run page needs a few thousand points. Each
`Decimated` keeps the newest ``recent`` points exactly (a ring buffer), and folds every
point that leaves the window into a log-spaced bin of the past: bin ``floor(per_decade *
log10(step + 1))``, so step 10..11 is one point apart and step 1e6..1.01e6 one bin. A
bin's plotted value is the mean of its finite values for the ``mean`` fields (loss) and
the last value for the others (forecast, band, W, LR); points move to the past 64 at a
time (vectorized). When the past reaches ``past`` bins, neighbouring bins are merged
pairwise. Memory is two fixed numpy blocks per series (and fewer than 64 newest points
waiting to enter the ring: a list of tuples in the pure build, a block of C doubles
written in place in the compiled one), whatever the run length; O(1) amortized.

A step that goes backwards (a resume or restart) truncates everything at or after it, so
the plotted curve stays ordered and shows the resumed run. Values are float64 with NaN for
"missing"; `columns()` turns NaN and infinities into ``None`` for JSON.

The whole run, at a bounded resolution that keeps peaks, is the store's: each staged
block of 64 points is also handed to the series' ``history`` (``store/envelope.py``),
and ``RunSeries.take_history`` gives what it gathered to the run's next snapshot.

    >>> s = Decimated(("step", "loss"), recent=100, past=16, per_decade=4)
    >>> for t in range(1, 100_001):
    ...     s.append(t, 1.0 / t)
    >>> cols = s.columns()
    >>> len(cols["step"]), cols["step"][:3], cols["step"][-2:]
    (170, [2.0, 8.0, 30.0], [99999.0, 100000.0])
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

_BLOCK = 64          # points folded into the past at once (vectorized)
_NAN = float("nan")

# ``time``: the point's Unix time (the event's ``ts``, else its arrival); a bin of the past
# keeps its last point's, the store its offset from the run's first (``Envelope(origin=)``)
TRAIN_FIELDS = ("step", "loss", "l_pred", "band_lo", "band_hi", "W", "lr", "grad_norm", "tokens", "time")
EVAL_FIELDS = ("step", "val_loss")
# a run's time and memory (docs/TIMING.md): built at its first loss event with one of them
TIMING_FIELDS = ("step", "step_time_s", "data_wait_s", "mem_allocated", "mem_reserved", "mem_total")


class Decimated:
    """One aligned multi-field series; field 0 is the step (x axis)."""

    def __init__(self, fields: tuple[str, ...], *, recent: int = 1024, past: int = 512,
                 per_decade: int = 96, mean: tuple[str, ...] = ("loss", "val_loss"),
                 history: Any = None) -> None:
        if recent < 1 or past < 2 or per_decade < 1:
            raise ValueError("recent must be >= 1, past >= 2 and per_decade >= 1")
        self.fields = tuple(fields)
        self.recent = recent
        self.past = past
        self.per_decade = per_decade
        k = len(self.fields)
        self._mean = np.flatnonzero([f in mean for f in self.fields])
        self._ring = np.full((min(recent, 64), k), np.nan)   # grows by doubling to recent+_BLOCK
        self._head = 0            # index of the oldest point in the ring
        self._n = 0               # points in the ring
        # past bins: last values, and sums/counts of finite values of the mean fields
        self._last = np.full((past, k), np.nan)
        self._sum = np.zeros((past, len(self._mean)))
        self._cnt = np.zeros((past, len(self._mean)))
        self._bin = np.zeros(past, dtype=np.int64)
        self._np = 0              # bins in use
        self._shift = 0           # pairwise merges so far: bin index >> shift
        self._stage: list[tuple] = []   # newest points, not yet in the ring (pure build)
        # compiled build: the newest points as C doubles, written in place (series.pxd)
        self._bufarr = np.full((_BLOCK, k), np.nan) if cython.compiled else None
        self._buf = self._bufarr
        self._nbuf = 0
        self._k = k
        self.last_step: float | None = None
        self.history = history    # an `Envelope` fed every staged block (store/envelope.py)

    def __len__(self) -> int:
        return self._n + self._np + (self._nbuf if cython.compiled else len(self._stage))

    def append(self, step: float, *values: float | None) -> None:
        """Add one point; points move into the ring 64 at a time."""
        self.push((step, *values))

    @cython.locals(i=cython.Py_ssize_t, j=cython.Py_ssize_t, n=cython.Py_ssize_t)
    def push(self, row: tuple) -> None:
        """``append`` of a row already built: ``(step, value, ...)``. Compiled: its values
        go into the stage block as C doubles (None -> NaN); the pure build runs
        ``_push_list`` instead (bound below the class)."""
        step, last = row[0], self.last_step
        if last is not None and step < last:
            self._flush()
            self.truncate(step)
        n = len(row)
        if n > self._k:
            raise ValueError(f"a row of {n} values for {self._k} fields")
        i = self._nbuf
        for j in range(self._k):
            v = row[j] if j < n else None
            self._buf[i, j] = _NAN if v is None else v
        self._nbuf = i + 1
        self.last_step = step
        if i + 1 >= _BLOCK:   # a full ring folds its oldest block then (``_flush``)
            self._flush()

    def _push_list(self, row: tuple) -> None:
        """``push`` in the pure build: the row on a short list (numpy element stores
        cost more than the rest of an append in Python)."""
        step, last = row[0], self.last_step
        if last is not None and step < last:
            self._flush()
            self.truncate(step)
        stage = self._stage
        stage.append(row)
        self.last_step = step
        if len(stage) >= _BLOCK:
            self._flush()

    def _staged(self) -> np.ndarray | None:
        """The staged points as a float array (None -> NaN), taken from the stage."""
        if cython.compiled:
            n = self._nbuf
            self._nbuf = 0
            return self._bufarr[:n].copy() if n else None
        stage, self._stage = self._stage, []
        k = len(self.fields)
        if set(map(len, stage)) != {k}:  # short rows (``append`` with fewer values): padded
            stage = [r + (None,) * (k - len(r)) for r in stage]
        return np.array(stage, dtype=float) if stage else None

    def _flush(self) -> None:
        """Move the staged points into the ring (folding the oldest into the past)."""
        stage = self._staged()
        if stage is None:
            return
        if self.history is not None:
            self.history.add(stage)
        while len(stage):
            cap = len(self._ring)
            if self._n == cap:
                if cap < self.recent + _BLOCK:
                    self._grow(min(2 * cap, self.recent + _BLOCK))
                else:
                    self._fold(_BLOCK)
                cap = len(self._ring)
            room = min(cap - self._n, len(stage), cap - (self._head + self._n) % cap)
            at = (self._head + self._n) % cap
            self._ring[at:at + room] = stage[:room]  # numpy converts: None -> NaN
            self._n += room
            stage = stage[room:]

    def _grow(self, cap: int) -> None:
        ring = np.full((cap, len(self.fields)), np.nan)
        ring[: self._n] = self._ordered_ring()
        self._ring, self._head = ring, 0

    def _fold(self, m: int) -> None:
        """Move the ``m`` oldest points of the ring into the past bins."""
        h = self._head
        rows = self._ring[h:h + m].copy() if h + m <= len(self._ring) else self._ordered_ring()[:m]
        self._head = (self._head + m) % len(self._ring)
        self._n -= m
        while True:
            bins = self._bins_of(rows[:, 0])
            starts = np.concatenate(([0], np.flatnonzero(bins[1:] != bins[:-1]) + 1))
            joins = bool(self._np) and self._bin[self._np - 1] == bins[0]
            if self._np + len(starts) - joins <= self.past:
                break
            self._merge_pairs()
        vals = rows[:, self._mean]
        finite = np.isfinite(vals)
        sums = np.add.reduceat(np.where(finite, vals, 0.0), starts, axis=0)
        cnts = np.add.reduceat(finite.astype(float), starts, axis=0)
        last = rows[np.append(starts[1:], len(rows)) - 1]
        i = self._np - 1 if joins else self._np
        j = i + len(starts)
        if joins:
            sums[0] += self._sum[i]
            cnts[0] += self._cnt[i]
        self._bin[i:j], self._last[i:j], self._sum[i:j], self._cnt[i:j] = bins[starts], last, sums, cnts
        self._np = j

    def _bins_of(self, steps: np.ndarray) -> np.ndarray:
        return (self.per_decade * np.log10(np.maximum(steps, 0.0) + 1.0)).astype(np.int64) >> self._shift

    def _merge_pairs(self) -> None:
        """Halve the past: bins with equal ``index >> 1`` become one."""
        self._shift += 1
        n, out = self._np, 0
        for i in range(n):
            b = self._bin[i] >> 1
            if out and self._bin[out - 1] == b:
                j = out - 1
                self._last[j] = self._last[i]
                self._sum[j] += self._sum[i]
                self._cnt[j] += self._cnt[i]
            else:
                j, out = out, out + 1
                self._bin[j] = b
                self._last[j], self._sum[j], self._cnt[j] = self._last[i], self._sum[i], self._cnt[i]
        self._np = out

    def truncate(self, step: float) -> None:
        """Forget every point at or after ``step`` (the run resumed from an earlier one)."""
        self._flush()
        if self.history is not None:
            self.history.truncate(step)
        ring = self._ordered_ring()
        keep = ring[ring[:, 0] < step]
        self._ring[:] = np.nan
        self._ring[: len(keep)] = keep
        self._head, self._n = 0, len(keep)
        past_steps = self._past_rows()[:, 0]
        self._np = int(np.searchsorted(past_steps, step, side="left"))
        self.last_step = float(keep[-1, 0]) if len(keep) else (
            float(past_steps[self._np - 1]) if self._np else None)

    def _ordered_ring(self) -> np.ndarray:
        h, n, cap = self._head, self._n, len(self._ring)
        if h + n <= cap:
            return self._ring[h:h + n].copy()
        return np.concatenate([self._ring[h:], self._ring[: h + n - cap]])

    def _past_rows(self) -> np.ndarray:
        n = self._np
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self._sum[:n] / self._cnt[:n]
        rows = self._last[:n].copy()
        rows[:, self._mean] = mean
        return rows

    def rows(self) -> np.ndarray:
        """All points, oldest first, as an (n, fields) float array (NaN = missing)."""
        self._flush()
        return np.concatenate([self._past_rows(), self._ordered_ring()])

    def columns(self) -> dict[str, list[Any]]:
        """JSON-safe columns: one list per field, ``None`` where missing or non-finite."""
        rows = self.rows()
        return {f: _jsonable(rows[:, i]) for i, f in enumerate(self.fields)}


if not cython.compiled:  # the pure build stages rows on a list (``_push_list``)
    Decimated.push = Decimated._push_list


def _jsonable(col: np.ndarray) -> list[Any]:
    return [float(v) if math.isfinite(v) else None for v in col.tolist()]


class Spark:
    """At most ``size`` (step, mean loss) points over a whole run: its sparkline, small
    enough to be stored with the run and listed for thousands of runs.

    Points are means of ``stride`` consecutive losses (non-finite ones left out; NaN when
    all were); when ``size`` points are held, neighbours merge pairwise and the stride
    doubles. O(1) amortized, no numpy. A step that goes backwards drops what followed.

    >>> sp = Spark(size=8)
    >>> for t in range(1, 101):
    ...     sp.add(t, 1.0 / t)
    >>> len(sp.points()) <= 8, sp.points()[-1][0]
    (True, 100)
    """

    __slots__ = ("size", "stride", "_pts", "_open", "_sum", "_nf", "_n", "_last")

    def __init__(self, size: int = 64) -> None:
        if size < 2 or size % 2:
            raise ValueError("size must be an even number >= 2")
        self.size = size
        self.stride = 1
        self._pts: list[tuple[float, float]] = []
        # the point in the making (``_open``): the sum of its finite losses (C doubles
        # compiled: series.pxd), how many, how many in all, its last step
        self._open = False
        self._sum, self._nf, self._n, self._last = 0.0, 0, 0, None

    @cython.locals(x=cython.double)
    def add(self, step: float, loss: float) -> None:
        if (self._open and step < self._last) or (self._pts and step <= self._pts[-1][0]):
            self._truncate(step)
        if not self._open:
            self._open = True
            self._sum, self._nf, self._n = 0.0, 0, 0
        x = loss
        if x - x == 0.0:    # finite (inf - inf and NaN - NaN are NaN)
            self._sum += x
            self._nf += 1
        self._n += 1
        self._last = step
        if self._n >= self.stride:
            self._pts.append((step, self._sum / self._nf if self._nf else _NAN))
            self._open = False
            if len(self._pts) >= self.size:
                self._pts = [(b[0], _mean2(a[1], b[1])) for a, b in zip(self._pts[::2], self._pts[1::2])]
                self.stride *= 2

    def _truncate(self, step: float) -> None:
        self._open = False
        while self._pts and self._pts[-1][0] >= step:
            self._pts.pop()

    def points(self) -> list[tuple[float, float]]:
        tail = [(self._last, self._sum / self._nf if self._nf else _NAN)] if self._open else []
        return self._pts + tail

    def snapshot(self) -> dict[str, Any]:
        return {"size": self.size, "stride": self.stride, "points": [list(p) for p in self.points()]}

    @classmethod
    def restore(cls, snap: dict[str, Any]) -> "Spark":
        sp = cls(int(snap["size"]))
        sp.stride = max(1, int(snap["stride"]))
        sp._pts = [(float(s), float(v)) for s, v in snap["points"]][-(sp.size - 1):]
        return sp


def _mean2(a: float, b: float) -> float:
    if a != a:
        return b
    return a if b != b else (a + b) / 2


class RunSeries:
    """What one run keeps for its page: train series, eval series and alert markers; and
    the envelopes of its whole history, written with its snapshots (``take_history``)."""

    def __init__(self, *, recent: int = 1024, past: int = 512, markers: int = 256,
                 history: dict[str, Any] | None = None, keep: bool = True) -> None:
        """``history``: the envelopes' stored state to resume from; ``keep=False``: no
        envelopes (a log analysed once, never stored)."""
        from .store.envelope import Envelope   # numpy only: no store import at module level

        h = history or {}
        self.envelopes = {"train": Envelope(TRAIN_FIELDS[1:], kind="train", origin="time"),
                          "eval": Envelope(EVAL_FIELDS[1:], kind="eval")} if keep else {}
        for kind, env in self.envelopes.items():
            if h.get(kind):
                env.restore(h[kind])
        self.train = Decimated(TRAIN_FIELDS, recent=recent, past=past, history=self.envelopes.get("train"))
        self.eval = Decimated(EVAL_FIELDS, recent=min(recent, 256), past=min(past, 256),
                              history=self.envelopes.get("eval"))
        self.markers: deque[dict[str, Any]] = deque(maxlen=markers)
        self.timing, self._timing_args = None, (keep, recent, past, h.get("timing"))   # add_timing

    def add_timing(self, step: int, timing: dict) -> None:
        """A loss event's fields of time and memory as a row (NaN where absent: memory
        comes every N steps); a bin of the past keeps each field's mean of finite values."""
        if self.timing is None:
            keep, recent, past, stored = self._timing_args
            env = None
            if keep:
                from .store.envelope import Envelope   # as in __init__
                env = self.envelopes["timing"] = Envelope(TIMING_FIELDS[1:], kind="timing", floor=256)
                if stored:
                    env.restore(stored)
            self.timing = Decimated(TIMING_FIELDS, recent=min(recent, 256), past=min(past, 256),
                                    mean=TIMING_FIELDS[1:], history=env)   # the eval series' size
        get = timing.get
        self.timing.push((step, get("step_time_s"), get("data_wait_s"), get("mem_allocated"),
                          get("mem_reserved"), get("mem_total")))

    def take_history(self) -> tuple[dict[str, Any], list]:
        """The envelopes' state (for the snapshot) and the chunks to write with it."""
        self.train._flush()
        self.eval._flush()
        if self.timing is not None:
            self.timing._flush()
        chunks = [c for c in (e.take() for e in self.envelopes.values()) if c is not None]
        return {k: e.snapshot() for k, e in self.envelopes.items()}, chunks

    def add_loss(self, step: int, loss: float, state: Any = None, lr: float | None = None,
                 grad_norm: float | None = None, tokens: float | None = None,
                 time: float | None = None) -> None:
        if state is None:
            self.train.push((step, loss, None, None, None, None, lr, grad_norm, tokens, time))
        else:                       # a MonitorState
            self.train.push((step, loss, state.l_pred, state.band_lo, state.band_hi, state.W, lr,
                             grad_norm, tokens, time))

    def add_eval(self, step: int, metrics: dict) -> None:
        val = metrics.get("val_loss", metrics.get("loss"))
        if isinstance(val, (int, float)) and not isinstance(val, bool):
            self.eval.append(step, float(val))

    def mark(self, alert: Any) -> None:
        """Remember an alert transition (an `Alert` value) as a marker on the chart."""
        self.markers.append({"step": alert.step, "kind": alert.kind, "severity": alert.severity,
                             "status": alert.status, "message": alert.message,
                             "details": alert.details})
