"""Store pruning under churn (issue 38): runs started and ended against `[state] max_runs`.

    nice .venv/bin/python tests/bench/prune_churn.py [--runs 10000] [--max-runs 300]

A real `wtwind` (its own store, `[runs] ended_ttl_s` 1 s so ended runs leave memory,
`[state] prune_interval_s` 1 s); one raw client starts and ends `--runs` runs (a
`run_start`, one loss, a `run_end` each), in batches. Sampled every 0.2 s from the
store's file (read-only) and `/metrics`: runs stored, runs in memory, and the worst
excess of stored runs over `max_runs` plus those in memory. Reported: the send time, the
worst excess (a pass deletes at most 100 runs, every 0.5 s while behind), the peak
stored, and how long after the last run_end the store is down to `max_runs` with
nothing left in memory.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from helpers import Daemon, raw_dealer, sample  # noqa: E402
from wtwin.emitters import wire  # noqa: E402


def stored(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        conn.close()


def frames(n: int, per_frame: int = 50):
    for start in range(0, n, per_frame):
        evs = []
        for i in range(start, min(n, start + per_frame)):
            run = f"churn-{i:06}"
            evs += [{"v": 1, "type": "run_start", "run": run, "seq": 1},
                    {"v": 1, "type": "loss", "run": run, "seq": 2, "step": 1, "loss": 2.0},
                    {"v": 1, "type": "run_end", "run": run, "seq": 3, "status": "completed"}]
        yield wire.encode_batch(evs)


def churn(runs: int, max_runs: int, settle_s: float = 60.0) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="wtwind-churn-"))
    env = {"WTWIND_RUNS__ENDED_TTL_S": "1", "WTWIND_STATE__MAX_RUNS": str(max_runs),
           "WTWIND_STATE__PRUNE_INTERVAL_S": "1", "WTWIND_RUNS__MAX_RUNS_PER_CLIENT": str(runs + 1)}
    worst, samples = 0, 0
    with Daemon(extra_env=env, tmpdir=str(tmp)) as d:
        db = Path(env.get("WTWIND_STATE__PATH", tmp / "wtwind.db"))

        def excess() -> int:
            return stored(db) - max_runs - int(sample(d, "wtwind_known_runs") or 0)

        sock, t0, last = raw_dealer(d.tcp), time.monotonic(), 0.0
        for f in frames(runs):
            sock.send(f)
            if time.monotonic() - last > 0.2:
                worst, samples, last = max(worst, excess()), samples + 1, time.monotonic()
        sent_s = time.monotonic() - t0
        while sample(d, "wtwind_events_received_total", type="run_end") < runs:
            worst, samples = max(worst, excess()), samples + 1
            time.sleep(0.2)
        done, peak = time.monotonic(), 0
        while time.monotonic() - done < settle_s:  # the runs leave memory; the store follows
            worst, samples = max(worst, excess()), samples + 1
            peak = max(peak, stored(db))
            if sample(d, "wtwind_known_runs") == 0 and stored(db) <= max_runs:
                break
            time.sleep(0.2)
        out = {"runs": runs, "max_runs": max_runs, "send_s": round(sent_s, 2),
               "processed_s": round(done - t0, 2), "worst_excess": worst, "peak_stored": peak,
               "samples": samples, "down_to_max_runs_after_s": round(time.monotonic() - done, 2),
               "stored_at_end": stored(db), "in_memory_at_end": int(sample(d, "wtwind_known_runs") or 0)}
        sock.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--max-runs", type=int, default=300)
    args = ap.parse_args()
    print(json.dumps(churn(args.runs, args.max_runs), indent=1))


if __name__ == "__main__":
    main()
