"""A run's whole history at a bounded resolution that keeps its peaks: min/max buckets.

The live page's series (``daemon/series.py``) keep the newest points exactly and fold the
past into means; the store keeps the whole run as an *envelope*: the steps are cut into
buckets of ``width`` steps (a power of two), and each bucket holds, per field, the
minimum and the maximum of the values seen in it and which of the two came first. When
a run holds more than ``2 * floor`` buckets the width doubles and neighbouring buckets
merge (bucket ``i`` of width ``w`` is half of bucket ``i // 2`` of width ``2w``), so a
run keeps between ``floor`` and ``2 * floor`` buckets once it is that long, whatever its
length. Drawn as min then max (or max then min, as they came), each bucket gives two
points: a spike of one step stays on the chart at its full height.

The contract, tested: for every bucket, its min and max are the min and max of the
finite values of the points whose step falls in ``[lo, hi]`` (float32-rounded on disk).

A block of buckets is a float64 array, one row a bucket: ``lo, hi`` (first and last step
seen in it), then ``k`` minima, ``k`` maxima and ``k`` flags (1: the min came first).
Plain functions; ``Envelope`` is the per-run accumulator (a few fields, plus the buckets
closed since its last write: the whole history lives on disk, ``series_rows.py``).

    >>> env = Envelope(("loss",), floor=4)
    >>> env.add(np.array([[t, 1.0 + (t == 50) * 5] for t in range(100)], dtype=float))
    >>> blk = np.concatenate([env.take().block, env.open])
    >>> env.width, len(blk), float(blk[:, 2].min()), float(blk[:, 3].max())
    (16.0, 7, 1.0, 6.0)
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGIC = b"E1"


def points(rows: np.ndarray) -> np.ndarray:
    """Raw rows ``(step, v1..vk)`` as one-point buckets."""
    k = rows.shape[1] - 1
    vals = rows[:, 1:]
    return np.hstack([rows[:, :1], rows[:, :1], vals, vals, np.ones((len(rows), k))])


def reduce(block: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Merge consecutive buckets with equal ``ids`` (vectorized): min of minima, max of
    maxima (NaN ignored), and which came first."""
    n, k = len(block), (block.shape[1] - 2) // 3
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    if len(starts) == n:
        return block
    ends = np.r_[starts[1:], n]
    mn_cols, mx_cols = block[:, 2:2 + k], block[:, 2 + k:2 + 2 * k]
    with np.errstate(invalid="ignore"):
        mn = np.fmin.reduceat(mn_cols, starts, axis=0)
        mx = np.fmax.reduceat(mx_cols, starts, axis=0)
    seg = np.repeat(np.arange(len(starts)), ends - starts)
    idx = np.arange(n)[:, None]
    imn = np.minimum.reduceat(np.where(mn_cols == mn[seg], idx, n), starts, axis=0)
    imx = np.minimum.reduceat(np.where(mx_cols == mx[seg], idx, n), starts, axis=0)
    own = np.take_along_axis(block[:, 2 + 2 * k:], np.minimum(imn, n - 1), axis=0)
    flag = np.where(imn == imx, own, (imn < imx).astype(float))
    return np.hstack([block[starts, :1], block[ends - 1, 1:2], mn, mx, flag])


def rebin(block: np.ndarray, width: float) -> np.ndarray:
    return reduce(block, np.floor(block[:, 0] / width)) if len(block) else block


def encode(block: np.ndarray) -> bytes:
    """Steps as float64, minima and maxima as float32, flags as bytes; zlib."""
    k = (block.shape[1] - 2) // 3
    body = b"".join((np.ascontiguousarray(block[:, :2]).tobytes(),
                     block[:, 2:2 + 2 * k].astype(np.float32).tobytes(),
                     block[:, 2 + 2 * k:].astype(np.uint8).tobytes()))
    return MAGIC + bytes((k,)) + zlib.compress(body, 6)


def decode(blob: bytes) -> np.ndarray:
    if blob[:2] != MAGIC:
        raise ValueError("not an envelope block")
    k, body = blob[2], zlib.decompress(blob[3:])
    nb = len(body) // (16 + 9 * k)
    steps = np.frombuffer(body, np.float64, 2 * nb).reshape(nb, 2)
    vals = np.frombuffer(body, np.float32, 2 * k * nb, 16 * nb).reshape(nb, 2 * k)
    flags = np.frombuffer(body, np.uint8, k * nb, (16 + 8 * k) * nb).reshape(nb, k)
    return np.hstack([steps, vals.astype(np.float64), flags.astype(np.float64)])


def columns(block: np.ndarray, fields: tuple[str, ...]) -> dict[str, list]:
    """Two rows a bucket, at its first and last step: each field's first extreme, then
    the other (a bucket of one step gives one row). NaN stays NaN (JSON: the caller)."""
    k = len(fields)
    mn, mx, fl = block[:, 2:2 + k], block[:, 2 + k:2 + 2 * k], block[:, 2 + 2 * k:] > 0.5
    first, second = np.where(fl, mn, mx), np.where(fl, mx, mn)
    one = block[:, 0] == block[:, 1]
    rows = np.empty((2 * len(block), k + 1))
    rows[0::2, 0], rows[1::2, 0] = block[:, 0], block[:, 1]
    rows[0::2, 1:], rows[1::2, 1:] = first, second
    # one step, two values (min != max cannot happen): keep one row
    rows = rows[np.repeat(~one, 2) | (np.arange(len(rows)) % 2 == 0)]
    out = {"step": rows[:, 0]}
    for i, f in enumerate(fields):
        out[f] = rows[:, i + 1]
    return out


@dataclass
class Chunk:
    """What one write adds to a run's stored history (``series_rows.write``)."""
    kind: str
    width: float
    block: np.ndarray | None      # buckets closed since the last write
    compact: bool                 # the width doubled: the stored buckets are rebinned
    truncate: float | None        # the run resumed from this step: drop what is at or after


class Envelope:
    """One run's envelope in the making: the open bucket and the closed ones not yet
    written. ``add`` takes blocks of rows in step order (``Decimated`` hands its staged
    64-point blocks); a step that goes back is ``truncate`` first."""

    def __init__(self, fields: tuple[str, ...], *, kind: str = "train", floor: int = 1024) -> None:
        if floor < 1:
            raise ValueError("floor must be >= 1")
        self.fields, self.kind, self.floor = tuple(fields), kind, floor
        self.width = 1.0
        self.stored = 0           # buckets written (an upper bound after a compaction)
        self.open: np.ndarray | None = None    # the newest bucket, (1, 2 + 3k)
        self._pending: list[np.ndarray] = []
        self._compact = False
        self._truncate: float | None = None

    def add(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        blk = points(rows)
        if self.open is not None:
            blk = np.concatenate([self.open, blk])
        blk = rebin(blk, self.width)
        self.open = blk[-1:]
        if len(blk) > 1:
            self._pending.append(blk[:-1])
        while self.stored + sum(map(len, self._pending)) + 1 > 2 * self.floor:
            self._double()

    def _double(self) -> None:
        self.width *= 2
        self._compact = True
        self.stored = (self.stored + 1) // 2
        blk = rebin(np.concatenate(self._pending + [self.open]), self.width)
        self.open = blk[-1:]
        self._pending = [blk[:-1]] if len(blk) > 1 else []

    def truncate(self, step: float) -> None:
        """Forget every bucket whose first step is at or after ``step``."""
        self._pending = [b[b[:, 0] < step] for b in self._pending]
        if self.open is not None and self.open[0, 0] >= step:
            self.open = None
        self._truncate = step if self._truncate is None else min(self._truncate, step)

    def take(self) -> Chunk | None:
        """The chunk to write now (None when nothing changed), and forget it."""
        blk = np.concatenate(self._pending) if self._pending else None
        if blk is None and not self._compact and self._truncate is None:
            return None
        out = Chunk(self.kind, self.width, blk, self._compact, self._truncate)
        self.stored += 0 if blk is None else len(blk)
        self._pending, self._compact, self._truncate = [], False, None
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"w": self.width, "n": self.stored,
                "open": None if self.open is None else self.open[0].tolist()}

    def restore(self, snap: dict[str, Any]) -> "Envelope":
        self.width, self.stored = float(snap["w"]), int(snap["n"])
        op = snap.get("open")
        self.open = None if op is None else np.array([op], dtype=float)
        return self
