"""A run's stored history (issue 23) and the store's disk budget (issue 24), measured.

1. The envelopes' cost per loss event on the hot path (``RunSeries`` with and without them).
2. Store size of one run of ``--steps`` steps, every train field set (the worst case for
   compression), written through the daemon's own path (``codec.encode`` +
   ``write_runs``) every ``--flush-every`` steps, as the flushes would.
3. ``--runs`` copies of that run: the file's size; then as many more, expired, and one
   pruning pass back to ``max_runs`` (its time, what it deleted, the size after).
4. Page load of the stored run over real HTTP from a real wtwind on that database: the
   run page's HTML and scripts, and its JSON (``/api/runs/<run>``), median of ``--loads``.

    .venv/bin/python tests/bench/stored_history.py [--steps 1000000] [--runs 10000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import namedtuple
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/helpers.py

from helpers import Daemon  # noqa: E402

from wtwin.daemon.run_state import RunState  # noqa: E402
from wtwin.daemon.series import RunSeries  # noqa: E402
from wtwin.daemon.store import codec, retention  # noqa: E402
from wtwin.daemon.store.db import open_db  # noqa: E402
from wtwin.daemon.store.run_rows import write_runs  # noqa: E402

State = namedtuple("State", "l_pred band_lo band_hi W")


def loss(t: int) -> float:
    return 2.0 + 8.0 * (t + 50) ** -0.45 + 0.01 * ((t * 7919) % 101) / 101 + (4.0 if t % 250_001 == 0 else 0.0)


def feed(series: RunSeries, t: int) -> None:
    lp = 2.0 + 8.0 * (t + 50) ** -0.45
    lr = 3e-4 * (100 if t == 500_000 else 1) * (1 - t / 2e6)
    series.add_loss(t, loss(t), State(lp, lp - 0.05, lp + 0.05, (t % 997) / 997 * 3), lr,
                    1.0 + ((t * 31) % 17) / 17, t * 4096.0)


def hot_path_us(n: int) -> tuple[float, float]:
    """Best of 3, interleaved, with and without the envelopes (taken every 1,000 events)."""
    best = {False: float("inf"), True: float("inf")}
    for _ in range(3):
        for keep in (False, True):
            s = RunSeries(keep=keep)
            t0 = time.perf_counter()
            for t in range(1, n + 1):
                feed(s, t)
                if keep and t % 1000 == 0:
                    s.take_history()
            best[keep] = min(best[keep], (time.perf_counter() - t0) / n * 1e6)
    return best[False], best[True]


def build_run(conn, steps: int, every: int) -> tuple[float, RunState]:
    r = RunState("long", preset="pretraining", cooldown_s=0, now=1.0)
    r.config = {"lr": 3e-4, "model": "gpt2-124M"}
    series = r.series
    t0 = time.perf_counter()
    for t in range(1, steps + 1):
        feed(series, t)
        r.spark.add(t, loss(t))
        if t % every == 0 or t == steps:
            r.step, r.loss = t, loss(t)
            conn.execute("BEGIN")
            write_runs(conn, [codec.encode(r)])
            conn.execute("COMMIT")
    return time.perf_counter() - t0, r


def size_of(conn, run: str) -> tuple[int, int, int, int]:
    series, rows, nb = conn.execute("SELECT SUM(length(data)), COUNT(*), SUM(n) FROM series WHERE run = ? "
                                    "AND kind = 'train'", (run,)).fetchone()
    snap = conn.execute("SELECT length(snapshot) + length(config) FROM runs WHERE run = ?", (run,)).fetchone()[0]
    return series, rows, snap, nb


def copies(conn, n: int, prefix: str, last_seen: float) -> None:
    conn.execute("BEGIN")
    for i in range(n):
        name = f"{prefix}{i:05}"
        conn.execute("INSERT INTO runs SELECT ?, 'completed', preset, config, first_seen, ?, step, snapshot, "
                     "updated_at FROM runs WHERE run = 'long'", (name, last_seen + i))
        conn.execute("INSERT INTO series(run, kind, lo, n, data) SELECT ?, kind, lo, n, data FROM series "
                     "WHERE run = 'long'", (name,))
    conn.execute("COMMIT")


def fetch(url: str) -> tuple[float, int, int]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
        zipped = resp.headers.get("Content-Encoding") == "gzip"
    ms = (time.perf_counter() - t0) * 1000
    return ms, len(body), len(gzip.decompress(body) if zipped else body)


def page_load(db: str, loads: int) -> None:
    with Daemon(tmpdir=str(Path(db).parent), extra_env={"WTWIND_STATE__PATH": db}) as d:
        for what, path in (("run page HTML + run.js + app.js + uPlot", None), ("/api/runs/<run>", "/api/runs/s00000")):
            times, sizes = [], None
            for _ in range(loads):
                if path is None:
                    parts = [fetch(d.url + p) for p in ("/runs/s00000", "/static/run.js", "/static/app.js",
                                                        "/static/uPlot.iife.min.js")]
                    times.append(sum(p[0] for p in parts))
                    sizes = (sum(p[1] for p in parts), sum(p[2] for p in parts))
                else:
                    ms, wire, raw = fetch(d.url + path)
                    times.append(ms)
                    sizes = (wire, raw)
            if path is not None:
                with urllib.request.urlopen(d.url + path, timeout=60) as resp:
                    page = json.loads(resp.read())
                print(f"  the page: {len(page['series']['step'])} rows a train series, "
                      f"{sum(v is not None for v in page['series']['lr'])} lr points")
            print(f"  {what}: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms "
                  f"({loads} loads; {sizes[0] / 1024:.0f} KiB on the wire, {sizes[1] / 1024:.0f} KiB JSON/raw)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--flush-every", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--hot-events", type=int, default=200_000)
    ap.add_argument("--loads", type=int, default=20)
    a = ap.parse_args()
    print(f"{platform.machine()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    base, kept = hot_path_us(a.hot_events)
    print(f"hot path, {a.hot_events} loss events: series {base:.2f} us/event without the envelopes, "
          f"{kept:.2f} with them (+{kept - base:.2f} us)")
    db = os.path.join(tempfile.mkdtemp(prefix="wtwin-bench-"), "wtwind.db")
    conn, lock = open_db(db)
    secs, r = build_run(conn, a.steps, a.flush_every)
    series, rows, snap, nb = size_of(conn, "long")
    print(f"one run of {a.steps} steps ({secs:.0f} s to build, written every {a.flush_every} steps): "
          f"train history {series / 1024:.1f} KiB in {rows} rows, {nb} buckets of "
          f"{r.series.envelopes['train'].width:.0f} steps; snapshot + config {snap / 1024:.1f} KiB")
    now = time.time()
    copies(conn, a.runs - 1, "r", now - 3 * 86400)
    print(f"{a.runs} such runs: file {os.path.getsize(db) / 2**20:.0f} MiB, "
          f"used {retention.used_bytes(conn) / 2**20:.0f} MiB")
    copies(conn, a.runs, "s", now - 2 * 86400)
    before = os.path.getsize(db)
    t0, passes, gone, longest = time.perf_counter(), 0, 0, 0.0
    while True:
        conn.execute("BEGIN")      # as on the writer thread: one transaction a pass
        res = retention.prune(conn, now, retention_s=30 * 86400, max_runs=a.runs, max_bytes=2**40,
                              ended_after_s=600, idle_after_s=86400)     # the daemon's 50 ms a pass
        conn.execute("COMMIT")
        passes, gone, longest = passes + 1, gone + len(res.runs), max(longest, res.elapsed_s)
        if not res.capped:
            break
    print(f"{2 * a.runs} expired runs pruned to max_runs {a.runs}: {gone} deleted in {passes} passes, "
          f"{time.perf_counter() - t0:.1f} s, the longest pass {longest * 1000:.0f} ms; file {before / 2**20:.0f} MiB (keeps its size), "
          f"used {retention.used_bytes(conn) / 2**20:.0f} MiB after")
    conn.close()
    lock.release()
    page_load(db, a.loads)


if __name__ == "__main__":
    main()
