"""The run page's per-event cost on the daemon's hot path: the plot series (9 fields)
and the whole-run sparkline, per loss event.

    .venv/bin/python tests/bench/series_cost.py [--events 200000]
"""

from __future__ import annotations

import argparse
import platform
import time

from wtwin.daemon.series import RunSeries, Spark


def per_event_us(n: int) -> tuple[float, float]:
    s, sp = RunSeries(), Spark()
    t0 = time.perf_counter()
    for t in range(1, n + 1):
        s.add_loss(t, 2.0 + 1.0 / t, None, 3e-4, 1.2, t * 4096.0)
    t1 = time.perf_counter()
    for t in range(1, n + 1):
        sp.add(t, 2.0 + 1.0 / t)
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    n = ap.parse_args().events
    best = min((per_event_us(n) for _ in range(3)), key=sum)
    print(f"series append {best[0]:.2f} us/event, sparkline {best[1]:.2f} us/event "
          f"({n} events, best of 3; {platform.machine()}, {time.strftime('%Y-%m-%d')})")


if __name__ == "__main__":
    main()
