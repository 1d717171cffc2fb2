"""Bounded memory: a real wtwind holding 10k runs, each with the state of a 1k-event run.

Feeding 10M events through today's detectors would take most of an hour, so the store
is seeded with 10k copies of the snapshot a real run has after 1,000 loss events (the
detectors' state is bounded: ring buffers and log-spaced summaries, so that is what
such a run holds). wtwind restores them all before it is ready, then takes one more
event for every run over a real socket. Its resident memory must stay under
``BASE_MB + 10_000 * PER_RUN_KB``; every run must process its event.
"""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
import zmq

from helpers import Daemon, wait_for
from wtwin.daemon.run_state import RunState
from wtwin.daemon.store import codec
from wtwin.daemon.store.db import open_db
from wtwin.emitters import wire

RUNS = 10_000
BASE_MB = 250      # the daemon with nothing in it: python, numpy, scipy, aiohttp, zmq
PER_RUN_KB = 120   # measured ~85 KB per restored run (see docs/RELIABILITY.md)


def seed(db) -> None:
    seed_runs(db, RUNS)


def seed_runs(db, n: int) -> None:
    """``n`` stored runs, each with the snapshot of a real run after 1,000 loss events."""
    run = RunState("template", preset="pretraining", cooldown_s=60.0, now=time.time())
    for step in range(1, 1001):
        run.observe({"type": "loss", "step": step, "loss": 2.0 + 5.0 / step ** 0.5}, time.time())
    run.hwm = {"em-template": 1000}
    row = codec.encode(run)
    conn, lock = open_db(str(db))
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                     [(f"m{i}", "running", row[2], row[3], now, now, 1000, row[7], now) for i in range(n)])
    conn.execute("COMMIT")
    conn.close()
    lock.release()


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow  # about a minute or two on 2 cores
@pytest.mark.timeout(300)
def test_ten_thousand_runs_stay_under_the_memory_bound(tmp_path):
    db = tmp_path / "state.db"
    seed(db)
    (tmp_path / "d").mkdir()
    d = Daemon(extra_env={"WTWIND_STATE__PATH": str(db), "WTWIND_RUNS__MAX_SERIES_RUNS": "10"},
               tmpdir=str(tmp_path / "d"))
    t0 = time.monotonic()
    d.start(timeout=180)
    ready_s = time.monotonic() - t0
    try:
        m = d.metrics()
        assert m[("wtwind_store_restored_runs", ())] == RUNS
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(d.tcp)
        for i in range(RUNS):
            sock.send(wire.encode({"v": 1, "type": "loss", "run": f"m{i}", "seq": 1, "step": 1001,
                                   "loss": 2.1}))
        wait_for(lambda: d.metrics().get(("wtwind_events_received_total", (("type", "loss"),))) == RUNS,
                 timeout=120, what="one event per run processed")
        rss = rss_mb(d.proc.pid)
        bound = BASE_MB + RUNS * PER_RUN_KB / 1024
        print(json.dumps({"runs": RUNS, "rss_mb": round(rss, 1), "bound_mb": bound,
                          "ready_s": round(ready_s, 2)}))
        assert rss < bound, f"RSS {rss:.0f} MB over the bound {bound:.0f} MB"
        assert d.metrics()[("wtwind_known_runs", ())] == RUNS
        sock.close()
    finally:
        assert d.stop() == 0
    with sqlite3.connect(db) as c:  # each run's 1001st event made it into its snapshot
        assert c.execute("SELECT count(*) FROM runs WHERE step = 1001").fetchone()[0] == RUNS
