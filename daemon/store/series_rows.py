"""A run's stored history on disk: the ``series`` table, one row a block of buckets.

Written with the run's snapshot, in the same savepoint (``quarantine.write_runs``), on
the writer thread: a chunk (``envelope.Chunk``) is appended as one row; when the run's
envelope doubled its width, or resumed from an earlier step, the run's rows are read,
rebinned or cut, and written back as one. Small rows are merged once a run holds more
than ``MAX_SMALL`` of them, so a run has few rows however often it is flushed. Read by
the pages (``history.run_record``) through their own read-only connection.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from . import envelope
from .envelope import Chunk

SEAL = 256        # a row with this many buckets is left alone until the next compaction
MAX_SMALL = 16    # more small rows than this for a run: merged into one


def write(conn: sqlite3.Connection, run: str, chunk: Chunk) -> None:
    new = chunk.buckets()
    if chunk.compact or chunk.truncate is not None:
        old = read(conn, run, chunk.kind)
        if new is not None and len(old):
            old = envelope.widen(old, (new.shape[1] - 2) // 3)
        if chunk.truncate is not None:
            old = old[old[:, 0] < chunk.truncate]
        parts = [p for p in (old, new) if p is not None and len(p)]
        blk = envelope.rebin(np.concatenate(parts), chunk.width) if parts else None
        conn.execute("DELETE FROM series WHERE run = ? AND kind = ?", (run, chunk.kind))
        _insert(conn, run, chunk.kind, blk)
        return
    _insert(conn, run, chunk.kind, new)
    small = []   # the newest rows, back to the last sealed one
    for rid, n in conn.execute("SELECT id, n FROM series WHERE run = ? AND kind = ? ORDER BY lo DESC, id DESC",
                               (run, chunk.kind)):
        if n >= SEAL:
            break
        small.append(rid)
    if len(small) > MAX_SMALL:
        blk = read(conn, run, chunk.kind, ids=small)   # widened to the newest block's fields
        conn.execute(f"DELETE FROM series WHERE id IN ({','.join('?' * len(small))})",
                     small)
        _insert(conn, run, chunk.kind, envelope.rebin(blk, chunk.width))


def _insert(conn: sqlite3.Connection, run: str, kind: str, blk: np.ndarray | None) -> None:
    if blk is not None and len(blk):
        conn.execute("INSERT INTO series(run, kind, lo, n, data) VALUES (?,?,?,?,?)",
                     (run, kind, float(blk[0, 0]), len(blk), envelope.encode(blk)))


def read(conn: sqlite3.Connection, run: str, kind: str, ids: list[int] | None = None) -> np.ndarray:
    """Every stored bucket of the run's ``kind`` series (or of rows ``ids``), in step
    order (may be empty)."""
    only = f" AND id IN ({','.join('?' * len(ids))})" if ids else ""
    blobs = [d for (d,) in conn.execute(f"SELECT data FROM series WHERE run = ? AND kind = ?{only} "
                                        "ORDER BY lo, id", (run, kind, *(ids or ())))]
    if not blobs:
        return np.empty((0, 5))
    blocks = [envelope.decode(b) for b in blobs]
    k = max((b.shape[1] - 2) // 3 for b in blocks)   # rows stored before a field was added
    return np.concatenate([envelope.widen(b, k) for b in blocks])
