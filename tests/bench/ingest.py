"""Ingest benchmark: wtwind's end-to-end event rate vs a raw pyzmq+msgpack loop.

Both consumers run in this process on the same ROUTER setup and are fed by the same
4 producer processes (raw DEALER sockets sending pre-encoded protocol-v1 frames, as
fast as ZeroMQ's back-pressure lets them). Producers wait on a barrier; the clock runs
from the barrier's release to the last event handled. The daemon side is the real
`Server`: receive, decode, validate, update run state (detectors included).

    .venv/bin/python tests/bench/ingest.py [--events 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import tempfile
import time

import msgpack
import zmq

from _producers import send_when_released
from wtwin.emitters import wire

PRODUCERS = 4


def _frames(run: str, n: int, batch: int) -> list[bytes]:
    evs = [{"v": 1, "type": "loss", "run": run, "seq": i + 1, "step": i + 1,
            "loss": 2.0 + 3.0 / (i + 1) ** 0.5 + 0.01 * ((i * 7919) % 13 - 6) / 6,
            "lr": 3e-4, "emitter": run} for i in range(n)]
    if batch == 1:
        return [wire.encode(e) for e in evs]
    return [wire.encode_batch(evs[i:i + batch], run) for i in range(0, n, batch)]


def _producer(endpoint: str, run: str, n: int, batch: int, go) -> None:
    send_when_released(endpoint, _frames(run, n, batch), go)


def _start_producers(endpoint: str, n: int, batch: int, tag: str):
    go = mp.Event()
    procs = [mp.Process(target=_producer, args=(endpoint, f"{tag}-{i}", n, batch, go))
             for i in range(PRODUCERS)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let them connect and pre-encode before the clock starts
    return go, procs


def raw_loop(endpoint: str, n: int, batch: int) -> float:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.bind(endpoint)
    go, procs = _start_producers(endpoint, n, batch, "raw")
    total, count = n * PRODUCERS, 0
    t0 = time.perf_counter()
    go.set()
    while count < total:
        _, frame = sock.recv_multipart()
        obj = msgpack.unpackb(frame, raw=False)
        count += len(obj["events"]) if obj.get("type") == "batch" else 1
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    sock.close()
    ctx.term()
    return total / elapsed


def daemon_loop(endpoint: str, n: int, batch: int, state_path: str) -> float:
    from wtwin.daemon import config as config_mod
    from wtwin.daemon.server import Server

    cfg = config_mod.load(environ={"WTWIND_LISTEN__ENDPOINTS": endpoint, "WTWIND_HTTP__PORT": "0",
                                   "WTWIND_STATE__PATH": state_path})

    async def run() -> float:
        server = Server(cfg)
        await server.startup(asyncio.get_running_loop())
        go, procs = _start_producers(endpoint, n, batch, f"daemon-b{batch}")
        total = n * PRODUCERS
        t0 = time.perf_counter()
        go.set()
        while server.stats.received["loss"] < total:
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.join()
        await server.shutdown()
        return total / elapsed

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000, help="events per producer")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wtwin-bench-")
    print(f"ingest: {PRODUCERS} producer processes x {args.events} loss events, cpus={os.cpu_count()}")
    print(f"{'frames':<14}{'raw loop ev/s':>16}{'wtwind ev/s':>16}{'ratio':>8}")
    for label, batch in (("single-event", 1), ("batch of 100", 100)):
        raw = raw_loop(f"ipc://{tmp}/raw-{batch}.sock", args.events, batch)
        ours = daemon_loop(f"ipc://{tmp}/d-{batch}.sock", args.events, batch,
                           f"{tmp}/state-{batch}.db")
        print(f"{label:<14}{raw:>16,.0f}{ours:>16,.0f}{ours / raw:>8.2f}")


if __name__ == "__main__":
    main()
