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
Plain functions; ``Envelope`` is the per-run accumulator (its width, plus the rows
received since its last write: the whole history lives on disk, ``series_rows.py``).
Two buckets of the same index can sit side by side where two writes met; each still
keeps the contract, and the next compaction merges them.

    >>> env = Envelope(("loss",), floor=4)
    >>> env.add(np.array([[t, 1.0 + (t == 50) * 5] for t in range(100)], dtype=float))
    >>> blk = env.take().buckets()
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
    n, k = rows.shape[0], rows.shape[1] - 1
    out = np.empty((n, 2 + 3 * k))
    out[:, 0] = out[:, 1] = rows[:, 0]
    out[:, 2:2 + k] = out[:, 2 + k:2 + 2 * k] = rows[:, 1:]
    out[:, 2 + 2 * k:] = 1.0
    return out


def reduce(block: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Merge consecutive buckets with equal ``ids`` (vectorized): min of minima, max of
    maxima (NaN ignored), and which came first."""
    n, k = len(block), (block.shape[1] - 2) // 3
    cut = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    if len(cut) == n - 1:
        return block
    starts = np.concatenate(([0], cut))
    ends = np.append(cut, n)
    mn_cols, mx_cols = block[:, 2:2 + k], block[:, 2 + k:2 + 2 * k]
    with np.errstate(invalid="ignore"):
        mn = np.fmin.reduceat(mn_cols, starts, axis=0)
        mx = np.fmax.reduceat(mx_cols, starts, axis=0)
    counts = ends - starts
    idx = np.arange(n)[:, None]
    imn = np.minimum.reduceat(np.where(mn_cols == np.repeat(mn, counts, axis=0), idx, n), starts, axis=0)
    imx = np.minimum.reduceat(np.where(mx_cols == np.repeat(mx, counts, axis=0), idx, n), starts, axis=0)
    own = block[np.minimum(imn, n - 1), np.arange(2 + 2 * k, 2 + 3 * k)]
    flag = np.where(imn == imx, own, imn < imx)
    return np.concatenate([block[starts, :1], block[ends - 1, 1:2], mn, mx, flag], axis=1)


def widen(block: np.ndarray, k: int) -> np.ndarray:
    """A block of fewer than ``k`` fields with the missing ones (the last) added as NaN:
    a block stored before a field was added (``time``) reads beside the newer ones."""
    k0 = (block.shape[1] - 2) // 3
    if k0 >= k:
        return block
    pad = np.full((len(block), k - k0), np.nan)
    return np.hstack([block[:, :2 + k0], pad, block[:, 2 + k0:2 + 2 * k0], pad,
                      block[:, 2 + 2 * k0:], np.ones((len(block), k - k0))])


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
    squashed: np.ndarray | None   # buckets made on the loop (snapshots lagged), then
    raw: list                     # blocks of rows, in step order
    compact: bool                 # the width doubled: the stored buckets are rebinned
    truncate: float | None        # the run resumed from this step: drop what is at or after

    def buckets(self) -> np.ndarray | None:
        """The chunk's rows as buckets of ``width`` (on the writer thread)."""
        parts = ([self.squashed] if self.squashed is not None else []) + (
            [points(np.concatenate(self.raw))] if self.raw else [])
        return rebin(np.concatenate(parts), self.width) if parts else None


class Envelope:
    """One run's envelope in the making: its bucket width, and the rows it received
    since its last write. ``add`` takes blocks of rows in step order (``Decimated``
    hands its staged 64-point blocks: a list append on the loop, no numpy work); a step
    that goes back is ``truncate`` first. The width doubles while the run's step span
    needs more than ``2 * floor`` buckets of it. Bucketing happens on the writer thread
    (``Chunk.buckets``); only when ``MAX_RAW`` rows wait (snapshots lagging) are they
    bucketed here, so what waits is at most ``MAX_RAW`` rows and ``2 * floor`` buckets."""

    MAX_RAW = 2048

    def __init__(self, fields: tuple[str, ...], *, kind: str = "train", floor: int = 1024,
                 origin: str | None = None) -> None:
        """``origin``: a field of Unix times, kept as seconds since the run's first
        (``t0``, in the snapshot): float32 holds that to a fraction of a second for weeks,
        a Unix time only to 128 s."""
        if floor < 1:
            raise ValueError("floor must be >= 1")
        self.fields, self.kind, self.floor = tuple(fields), kind, floor
        self._origin = None if origin is None else 1 + self.fields.index(origin)   # its row column
        self.t0: float | None = None
        self.width = 1.0
        self.first: float | None = None   # the run's first step (the span the width covers)
        self._raw: list[np.ndarray] = []
        self._nraw = 0
        self._squashed: np.ndarray | None = None
        self._compact = False
        self._truncate: float | None = None

    def add(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        if self.first is None:
            self.first = float(rows[0, 0])
        at = self._origin
        if at is not None:        # the block is the caller's too (Decimated's ring): a copy
            if self.t0 is None:
                times = rows[:, at][np.isfinite(rows[:, at])]
                self.t0 = float(times[0]) if len(times) else None
            rows = rows.copy()
            rows[:, at] -= np.nan if self.t0 is None else self.t0
        self._raw.append(rows)
        self._nraw += len(rows)
        while (rows[-1, 0] - self.first) / self.width >= 2 * self.floor:
            self.width *= 2
            self._compact = True
        if self._nraw >= self.MAX_RAW:
            self._squash()

    def _squash(self) -> None:
        parts = ([self._squashed] if self._squashed is not None else []) + [points(np.concatenate(self._raw))]
        self._squashed = rebin(np.concatenate(parts), self.width)
        self._raw, self._nraw = [], 0

    def truncate(self, step: float) -> None:
        """Forget every row and bucket whose first step is at or after ``step``."""
        self._raw = [r[r[:, 0] < step] for r in self._raw]
        self._nraw = sum(map(len, self._raw))
        if self._squashed is not None:
            self._squashed = self._squashed[self._squashed[:, 0] < step]
        if self.first is not None and step < self.first:
            self.first = float(step)
        self._truncate = step if self._truncate is None else min(self._truncate, step)

    def take(self) -> Chunk | None:
        """The chunk to write now (None when nothing changed), and forget it."""
        raw = [r for r in self._raw if len(r)]
        if self._squashed is None and not raw and not self._compact and self._truncate is None:
            return None
        out = Chunk(self.kind, self.width, self._squashed, raw, self._compact, self._truncate)
        self._raw, self._nraw, self._squashed = [], 0, None
        self._compact, self._truncate = False, None
        return out

    def snapshot(self) -> dict[str, Any]:
        out = {"w": self.width, "first": self.first}
        if self.t0 is not None:
            out["t0"] = self.t0
        return out

    def restore(self, snap: dict[str, Any]) -> "Envelope":
        self.width = float(snap["w"])
        self.first = None if snap.get("first") is None else float(snap["first"])
        t0 = snap.get("t0")   # absent: stored before times were kept, or none seen yet
        self.t0 = float(t0) if isinstance(t0, (int, float)) and t0 == t0 else None
        return self
