"""The store's disk budget: which stored runs go, oldest first, and deleting them.

Candidates are the runs that are over: ended and no longer in memory (``live``: the
names the run table holds), whatever their age, and, in memory or not, runs ended more
than ``ended_after_s`` ago or silent more than ``idle_after_s`` (the run table's TTLs).
A run still in memory and within its TTL is never one: its next snapshot would write
its row again without its history. So an ended run is prunable as soon as it has left
memory, not ``ended_after_s`` after its end (issue 38: 1,000 ended runs with
``max_runs`` 300 were all still stored), and the store holds at most ``max_runs`` runs
plus those in memory. Of the candidates, ``prune`` deletes, oldest ``last_seen`` first:

1. every run last seen more than ``retention_days`` ago;
2. as many as the store holds past ``max_runs`` runs;
3. while the database's used pages exceed ``max_bytes``, runs until the estimate of
   what they hold brings it to 90% of that (the file keeps its size; SQLite reuses the
   freed pages).

A run goes with its history and its alerts, except alerts with a delivery still pending
or dead (the outbox and ``wtwind alerts`` keep those). At most ``MAX_PER_PASS`` runs a
pass, and deleting stops once the pass has taken ``MAX_PASS_S``, so the writer thread
(alerts' commits included) is never held long; the caller runs another pass soon when
either cap was hit. Runs on the writer thread: plain SQL, no loop.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field

MAX_PER_PASS = 100   # runs chosen a pass
MAX_PASS_S = 0.05    # ... deleted 10 at a time until the pass has held the writer this long
KEEP_STATES = ("pending", "dead")   # deliveries whose alert rows stay

_OVER = ("SELECT run, last_seen, status FROM runs WHERE status != 'running' OR last_seen < ? "
         "ORDER BY last_seen LIMIT ?")
_SIZE = ("SELECT COALESCE(length(snapshot), 0) + length(config) + COALESCE((SELECT SUM(length(data)) "
         "FROM series s WHERE s.run = r.run), 0) + COALESCE((SELECT SUM(length(body)) FROM alerts a "
         "WHERE a.run = r.run), 0) FROM runs r WHERE run = ?")


@dataclass
class Pruned:
    """What one pass deleted, by reason."""
    runs: list[str] = field(default_factory=list)
    age: int = 0
    count: int = 0
    size: int = 0
    bytes: int = 0          # estimated bytes the deleted runs held
    used_bytes: int = 0     # the database's used pages after the pass
    capped: bool = False    # MAX_PER_PASS was hit: more to do
    elapsed_s: float = 0.0  # the writer thread's time on the pass


def used_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
    return pages * conn.execute("PRAGMA page_size").fetchone()[0]


def candidates(conn: sqlite3.Connection, now: float, live: frozenset[str], ended_after_s: float,
               idle_after_s: float) -> list[tuple[str, float]]:
    """Up to ``MAX_PER_PASS`` runs that are over (the module's docstring), oldest first."""
    ended_before, idle_before = now - ended_after_s, now - idle_after_s
    rows = conn.execute(_OVER, (idle_before, MAX_PER_PASS + len(live))).fetchall()
    return [(run, seen) for run, seen, status in rows
            if seen < idle_before or (status != "running" and (run not in live or seen < ended_before))
            ][:MAX_PER_PASS]


def prune(conn: sqlite3.Connection, now: float, *, retention_s: float, max_runs: int, max_bytes: int,
          ended_after_s: float, idle_after_s: float, max_pass_s: float = MAX_PASS_S,
          live: frozenset[str] = frozenset()) -> Pruned:
    """``live``: the runs in memory now (none: every ended run counts as left)."""
    out, t0 = Pruned(), time.perf_counter()
    cands = candidates(conn, now, live, ended_after_s, idle_after_s)
    total = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    i = 0
    while i < len(cands) and cands[i][1] < now - retention_s and len(out.runs) < MAX_PER_PASS:
        out.runs.append(cands[i][0])
        i += 1
    out.age = len(out.runs)
    while i < len(cands) and total - len(out.runs) > max_runs and len(out.runs) < MAX_PER_PASS:
        out.runs.append(cands[i][0])
        i += 1
    out.count = len(out.runs) - out.age
    sizes = [conn.execute(_SIZE, (r,)).fetchone()[0] for r in out.runs]
    left = used_bytes(conn) - sum(sizes)
    if left > max_bytes:              # over max_bytes: down to 90% of it
        over = left - int(0.9 * max_bytes)
        while i < len(cands) and over > 0 and len(out.runs) < MAX_PER_PASS:
            size = conn.execute(_SIZE, (cands[i][0],)).fetchone()[0]
            out.runs.append(cands[i][0])
            sizes.append(size)
            over -= size
            i += 1
        out.size = len(out.runs) - out.age - out.count
    out.capped = len(out.runs) >= MAX_PER_PASS
    for k in range(0, len(out.runs), 10):
        delete(conn, out.runs[k:k + 10])
        if time.perf_counter() - t0 > max_pass_s and k + 10 < len(out.runs):
            out.runs, sizes, out.capped = out.runs[:k + 10], sizes[:k + 10], True
            out.age = min(out.age, k + 10)
            out.count = min(out.count, k + 10 - out.age)
            out.size = len(out.runs) - out.age - out.count
            break
    out.bytes = sum(sizes)
    out.used_bytes = used_bytes(conn)
    out.elapsed_s = time.perf_counter() - t0
    return out


def delete(conn: sqlite3.Connection, runs: list[str]) -> None:
    """Delete the runs, their history, and their alerts that no delivery still needs."""
    if not runs:
        return
    marks = ",".join("?" * len(runs))
    keep = ",".join(f"'{s}'" for s in KEEP_STATES)
    keys = [k for (k,) in conn.execute(
        f"SELECT key FROM alerts WHERE run IN ({marks}) AND NOT EXISTS (SELECT 1 FROM deliveries d "
        f"WHERE d.key = alerts.key AND d.state IN ({keep}))", runs)]
    for k in range(0, len(keys), 500):
        part = keys[k:k + 500]
        m = ",".join("?" * len(part))
        conn.execute(f"DELETE FROM deliveries WHERE key IN ({m})", part)
        conn.execute(f"DELETE FROM alerts WHERE key IN ({m})", part)
    conn.execute(f"DELETE FROM series WHERE run IN ({marks})", runs)
    conn.execute(f"DELETE FROM runs WHERE run IN ({marks})", runs)
