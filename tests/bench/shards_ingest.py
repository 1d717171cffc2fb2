"""Sharded ingest: the same events into 1, 2, ... real `wtwind` processes (docs/SHARDING.md).

Each shard is a real daemon (``python -m wtwin.daemon.cli --shard s<i>``, its own store,
tcp). The runs are named so that the pick (``shards.pick``) spreads them evenly over the
shards; producer processes send each run's pre-encoded single-event loss frames to its
shard, as fast as ZeroMQ's back-pressure lets them, after a common release. The clock
runs from the release until every daemon's ``wtwind_events_received_total{type="loss"}``
(read on ``/metrics`` every 0.1 s) has all of its runs' events: the aggregate rate, and
its ratio to one daemon, in one run. Producers and daemons share the machine's cores:
on a 2-core machine, 2 shards and the producers contend for the same two.

    .venv/bin/python tests/bench/shards_ingest.py [--shards 1,2] [--runs 8] [--events 10000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the helpers

from _producers import send_when_released  # noqa: E402
from helpers import Daemon  # noqa: E402
from wtwin.emitters import shards, wire  # noqa: E402

PRODUCERS = 4


def frames(run: str, n: int) -> list[bytes]:
    return [wire.encode({"v": 1, "type": "loss", "run": run, "seq": i + 1, "step": i + 1,
                         "loss": 2.0 + 3.0 / (i + 1) ** 0.5 + 0.01 * ((i * 7919) % 13 - 6) / 6,
                         "lr": 3e-4, "emitter": run}) for i in range(n)]


def producer(targets: list[tuple[str, str]], n: int, go) -> None:
    """One process; its runs' frames interleaved, each to its run's shard (one socket per run)."""
    import threading

    threads = [threading.Thread(target=send_when_released, args=(ep, frames(run, n), go))
               for run, ep in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def even_names(endpoints: list[str], runs: int, tag: str) -> list[str]:
    """``runs`` names, as many on each endpoint (the hash decides; we only choose names)."""
    per = runs // len(endpoints)
    out, count, i = [], dict.fromkeys(endpoints, 0), 0
    while len(out) < per * len(endpoints):
        name, i = f"{tag}-{i}", i + 1
        ep = shards.pick(name, endpoints)
        if count[ep] < per:
            count[ep] += 1
            out.append(name)
    return out


def received(d: Daemon) -> float:
    return sum(v for (name, labels), v in d.metrics().items()
               if name == "wtwind_events_received_total" and ("type", "loss") in labels)


def measure(n_shards: int, runs: int, n: int, tmp: Path) -> float:
    daemons = []
    try:
        for i in range(n_shards):
            home = tmp / f"n{n_shards}-s{i}"
            home.mkdir()
            daemons.append(Daemon(args=("--shard", f"s{i}"), tmpdir=str(home),
                                  extra_env={"WTWIND_LOG__LEVEL": "warning"}).start())
        eps = [d.tcp for d in daemons]
        names = even_names(eps, runs, f"bench{n_shards}")
        go = mp.Event()
        procs = [mp.Process(target=producer, args=([(r, shards.pick(r, eps)) for r in names[k::PRODUCERS]],
                                                   n, go)) for k in range(PRODUCERS)]
        for p in procs:
            p.start()
        time.sleep(1.5)  # connected, frames encoded
        want = {d.tcp: n * sum(shards.pick(r, eps) == d.tcp for r in names) for d in daemons}
        t0 = time.perf_counter()
        go.set()
        pending = list(daemons)
        while pending:
            time.sleep(0.1)
            pending = [d for d in pending if received(d) < want[d.tcp]]
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.join()
        return n * len(names) / elapsed
    finally:
        for d in daemons:
            d.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", default="1,2", help="shard counts to compare, e.g. 1,2,4")
    ap.add_argument("--runs", type=int, default=8, help="runs (a multiple of every shard count)")
    ap.add_argument("--events", type=int, default=10_000, help="loss events per run")
    args = ap.parse_args()
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="wtwin-bench-shards-"))
    counts = [int(x) for x in args.shards.split(",")]
    print(f"sharded ingest: {args.runs} runs x {args.events} single-event loss frames, "
          f"{PRODUCERS} producer processes, cpus={os.cpu_count()}")
    print(f"{'shards':<8}{'events/s':>12}{'vs ' + str(counts[0]):>8}")
    base = None
    for k in counts:
        rate = measure(k, args.runs, args.events, tmp)
        base = base or rate
        print(f"{k:<8}{rate:>12,.0f}{rate / base:>8.2f}")


if __name__ == "__main__":
    main()
