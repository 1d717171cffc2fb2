"""Emitter benchmark: cost of `emit.loss()` in the caller's thread.

Measured with the daemon up (a ROUTER draining in a thread of this process), down
(nothing listening on the endpoint) and sharded (an endpoint list of 8, the run's pick
up, the others down), side by side in one run. Each call is timed with perf_counter_ns;
the timer's own overhead (measured on an empty call) is reported. The shard pick itself
(``shards.pick``, made once per emitter) is timed apart for 2, 8 and 64 endpoints.

    .venv/bin/python tests/bench/emitter_cost.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

import zmq

from wtwin.emitters import Emitter, shards


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sink(endpoint: str, stop: threading.Event) -> None:
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(endpoint)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while not stop.is_set():
        if poller.poll(50):
            while True:
                try:
                    sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
    sock.close(0)


def time_calls(emit: Emitter, calls: int) -> list[int]:
    out = [0] * calls
    clock = time.perf_counter_ns
    loss = emit.loss
    for i in range(calls):
        t0 = clock()
        loss(i, 2.5, lr=3e-4)
        out[i] = clock() - t0
    return out


def summarize(ns: list[int]) -> tuple[float, float, float]:
    ns = sorted(ns)
    return (statistics.median(ns) / 1e3, ns[int(0.99 * len(ns))] / 1e3, ns[-1] / 1e3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    args = ap.parse_args()
    empty = [0] * 100_000
    clock = time.perf_counter_ns
    for i in range(len(empty)):
        t0 = clock()
        empty[i] = clock() - t0
    print(f"timer overhead: median {statistics.median(empty) / 1e3:.3f} us")
    print(f"{'daemon':<8}{'median us':>12}{'p99 us':>10}{'max us':>10}{'dropped':>10}")
    up = f"tcp://127.0.0.1:{free_port()}"
    stop = threading.Event()
    th = threading.Thread(target=sink, args=(up, stop), daemon=True)
    th.start()
    others = [f"tcp://127.0.0.1:{free_port()}" for _ in range(7)]
    for label, endpoint in (("up", up), ("down", f"tcp://127.0.0.1:{free_port()}"),
                            ("sharded", None)):
        run = f"bench-{label}"
        if endpoint is None:  # a list of 8 where this run's pick is the live one
            run = next(r for i in range(1000) if shards.pick(r := f"bench-{i}", [up] + others) == up)
            endpoint = [up] + others
        emit = Emitter(endpoint, run=run, queue_size=args.calls + 10)
        ns = time_calls(emit, args.calls)
        emit.close(timeout=2)
        med, p99, worst = summarize(ns)
        print(f"{label:<8}{med:>12.2f}{p99:>10.2f}{worst:>10.1f}{emit.stats['dropped']:>10}")
    stop.set()
    print(f"{'shards':<8}{'pick median us':>16}")
    for n in (2, 8, 64):
        eps = [f"tcp://wtwind-{i}.wtwind:5557" for i in range(n)]
        ns = []
        for i in range(2000):
            t0 = clock()
            shards.pick(f"run-{i}", eps)
            ns.append(clock() - t0)
        print(f"{n:<8}{statistics.median(ns) / 1e3:>16.2f}")


if __name__ == "__main__":
    main()
