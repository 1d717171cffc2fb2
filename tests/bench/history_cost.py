"""The run list's history query: stored runs listed and searched from the SQLite store.

5,000 stored runs (each a real 3,000-step run's snapshot, sparkline included); the list at
limits 50 and 500, a name search, one run's record. These run in a worker thread, off the
daemon's event loop, once per page poll (2 s).

    .venv/bin/python tests/bench/history_cost.py [--runs 5000]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

from wtwin.daemon.run_state import RunState
from wtwin.daemon.store import codec
from wtwin.daemon.store.db import open_db
from wtwin.daemon.store.history import list_runs, run_record
from wtwin.daemon.store.run_rows import UPSERT_RUN as _UPSERT_RUN


def ms(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return 1000 * (time.perf_counter() - t0), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5000)
    n = ap.parse_args().runs
    path = os.path.join(tempfile.mkdtemp(prefix="wtwin-bench-"), "wtwind.db")
    conn, lock = open_db(path)
    r = RunState("x", preset="pretraining", cooldown_s=0, now=1.0)
    for s in range(1, 3001):
        r.observe({"type": "loss", "step": s, "loss": 3.0 / s ** 0.3}, 2.0)
    r.status = "completed"
    row = codec.encode(r)
    conn.execute("BEGIN")
    conn.executemany(_UPSERT_RUN, [(f"run-{i}", "completed", *row[2:4], 1.0 + i, 2.0 + i, 3000,
                                    row[7], 3.0) for i in range(n)])
    conn.execute("COMMIT")
    print(f"{n} stored runs, {len(row[7])} bytes a snapshot ({platform.machine()}, {time.strftime('%Y-%m-%d')})")
    for limit in (50, 500):
        t, out = ms(lambda: list_runs(path, limit=limit))
        print(f"  list, limit {limit}: {t:.1f} ms ({len(out['runs'])} rows)")
    t, out = ms(lambda: list_runs(path, q="run-49", limit=500))
    print(f"  search 'run-49': {t:.1f} ms ({len(out['runs'])} rows)")
    t, _ = ms(lambda: run_record(path, "run-77"))
    print(f"  one run's record: {t:.1f} ms")
    lock.release()


if __name__ == "__main__":
    main()
