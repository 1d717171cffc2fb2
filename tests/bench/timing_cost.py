"""What the run's time and memory cost per loss event (issue 39): the `throughput` and
`memory` detectors, with and without timing, and the whole monitor's update around them.

    .venv/bin/python tests/bench/timing_cost.py [--n 200000]

Subjects (one seeded synthetic run, values precomputed; each call timed with
``perf_counter_ns``, the median reported: a shared machine's preemption moves only the
tail; a Python loop's own cost is measured and subtracted):

- ``throughput.observe``, ``memory.observe`` on an event without timing (the path of a
  run that sends none: NaN in, nothing learned) and with it (``ts``, ``step_time_s``,
  ``data_wait_s``; memory bytes every 50th event, as the callbacks send them). Called from
  Python, so each includes a Python call (~30-40 ns) that the monitor's C call to
  ``see`` does not pay: an upper bound on the detectors' cost.
- ``RunMonitor.update_loss`` without timing, with ``ts`` only, and with ``ts`` and the
  ``timing`` fields: the difference between the last two and the first is what timing
  adds to a whole update (the rule that judges them included).
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import statistics
import time

from wtwin.detect import BUILD, COMPILED, RunMonitor
from wtwin.detect.memory import MemoryDetector
from wtwin.detect.throughput import ThroughputDetector

NAN = math.nan


def _median_ns(fn, args_list) -> float:
    clock = time.perf_counter_ns
    out = []
    for args in args_list:
        t0 = clock()
        fn(*args)
        out.append(clock() - t0)
    return statistics.median(out)


def _empty(*_a, **_k) -> None:
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200000)
    n = ap.parse_args().n
    rng = random.Random(0)
    ts, rows = 1.7e9, []
    for t in range(1, n + 1):
        dt = 0.2 * (1 + 0.05 * rng.random())
        ts += dt
        mem = (40 + t / 1e5) * 2 ** 30 if t % 50 == 0 else NAN
        rows.append((t, 2.0 + 5 * t ** -0.3 + rng.gauss(0, 0.02), ts, dt, 0.01, mem))
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"build: {BUILD}, n={n}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    loop = _median_ns(_empty, [(r[0],) for r in rows])
    res = {}
    tp = ThroughputDetector()
    res["throughput.observe, no timing"] = _median_ns(
        tp.observe, [(r[0], NAN, NAN, NAN, NAN) for r in rows])
    tp = ThroughputDetector()
    res["throughput.observe, ts + step_time_s + data_wait_s"] = _median_ns(
        tp.observe, [(r[0], r[2], r[3], NAN, r[4]) for r in rows])
    mem = MemoryDetector()
    res["memory.observe, no timing"] = _median_ns(
        mem.observe, [(r[0], NAN, NAN, NAN, NAN) for r in rows])
    mem = MemoryDetector()
    res["memory.observe, ts + bytes every 50th"] = _median_ns(
        mem.observe, [(r[0], r[2], NAN, r[5], 48 * 2 ** 30) for r in rows])
    for k, v in res.items():
        print(f"  {k:<55} {max(v - loop, 0.0) / 1000:6.3f} µs (call {v / 1000:.3f} µs, "
              f"loop {loop / 1000:.3f} µs)")
    upd = {}
    mon = RunMonitor()
    upd["no timing"] = _median_ns(mon.update_loss, [(r[0], r[1]) for r in rows])
    mon = RunMonitor()
    upd["ts"] = _median_ns(mon.update_loss, [(r[0], r[1], None, None, r[2]) for r in rows])
    mon = RunMonitor()
    timed = [(r[0], r[1], None, None, r[2], None,
              {"step_time_s": r[3], "data_wait_s": r[4]} if r[5] != r[5] else
              {"step_time_s": r[3], "data_wait_s": r[4], "mem_reserved": r[5],
               "mem_total": 48 * 2 ** 30}) for r in rows]
    upd["ts + timing"] = _median_ns(mon.update_loss, timed)
    for k, v in upd.items():
        extra = "" if k == "no timing" else f"  (+{(v - upd['no timing']) / 1000:.3f} µs)"
        print(f"  RunMonitor.update_loss, {k:<12} median {v / 1000:6.3f} µs{extra}")
    print(f"compiled: {COMPILED}")


if __name__ == "__main__":
    main()
