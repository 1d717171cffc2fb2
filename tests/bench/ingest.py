"""Ingest benchmark: wtwind's end-to-end event rate vs a raw pyzmq+msgpack loop.

Both consumers run in this process on the same ROUTER setup and are fed by the same
4 producer processes (raw DEALER sockets sending pre-encoded protocol-v1 frames, as
fast as ZeroMQ's back-pressure lets them). Producers wait on a barrier; the clock runs
from the barrier's release to the last event handled. The daemon side is the real
`Server`: receive, decode, validate, update run state (detectors included).

    .venv/bin/python tests/bench/ingest.py [--events 50000]

It then says where the daemon's time goes: the same single-event frames replayed in
this process, without sockets, through the raw decode, the daemon's decode and
validation, the whole `Server.handle_frame`, and `RunMonitor.update_loss` alone (fresh
monitors fed the same events); the daemon's path without the detectors is the
difference of the last two.
"""

from __future__ import annotations

import argparse
import asyncio
import math
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


def _per_event(fn, items, repeat: int = 1) -> float:
    """CPU us per item of ``fn(item)`` over all items; the best of ``repeat`` passes."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        for it in items:
            fn(it)
        best = min(best, time.process_time() - t0)
    return best / len(items) * 1e6


def breakdown(n: int) -> dict[str, float]:
    """Per-event CPU (us) of each stage, replayed in process over 4 interleaved runs."""
    from wtwin.daemon import config as config_mod
    from wtwin.detect import RunMonitor
    from wtwin.daemon.server import Server

    per_run = [_frames(f"replay-{i}", n, 1) for i in range(PRODUCERS)]
    frames = [f for group in zip(*per_run) for f in group]
    events = [msgpack.unpackb(f, raw=False) for f in frames]
    out = {"raw decode (msgpack)": _per_event(lambda f: msgpack.unpackb(f, raw=False), frames, 3),
           "daemon decode + validate": _per_event(lambda f: wire.decode(f, 1 << 20), frames, 3)}
    monitors = {}

    def monitor_only(e):
        mon = monitors.get(e["run"])
        if mon is None:
            mon = monitors[e["run"]] = RunMonitor("pretraining")
        mon.update_loss(e["step"], e["loss"], e.get("lr"), e.get("grad_norm"))

    tmp = tempfile.mkdtemp(prefix="wtwin-bench-replay-")
    cfg = config_mod.load(environ={"WTWIND_LISTEN__ENDPOINTS": f"ipc://{tmp}/r.sock",
                                   "WTWIND_HTTP__PORT": "0", "WTWIND_STATE__PATH": f"{tmp}/s.db"})

    async def whole() -> float:
        server = Server(cfg)
        await server.startup(asyncio.get_running_loop())
        handle = server.handle_frame
        us = _per_event(lambda f: handle(b"replay", f), frames)
        await server.shutdown()
        return us

    out["Server.handle_frame (all of it)"] = asyncio.run(whole())
    out["RunMonitor.update_loss alone"] = _per_event(monitor_only, events)
    out["handle_frame without the detectors"] = (out["Server.handle_frame (all of it)"]
                                                 - out["RunMonitor.update_loss alone"])
    return out


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
        if batch == 1:
            single_raw = raw
    print(f"\nwhere the time goes (single-event frames replayed in process, CPU us per event; "
          f"the raw socket loop above spent {1e6 / single_raw:.1f} us per event, so half its "
          f"rate leaves the daemon {2e6 / single_raw:.1f} us):")
    for stage, us in breakdown(args.events).items():
        print(f"  {stage:<38}{us:>8.2f}")


if __name__ == "__main__":
    main()
