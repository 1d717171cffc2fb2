"""Ingest benchmark: wtwind's event rate vs a raw ROUTER recv + msgpack decode loop.

    .venv/bin/python tests/bench/ingest.py [--events 20000] [--repeat 1]

Every consumer runs in this process on the same ROUTER setup and is fed by 4 producer
processes (DEALER sockets sending pre-encoded protocol-v1 loss frames as fast as
ZeroMQ's back-pressure lets them). This process and the producers are pinned to the
same 2 CPUs (0 and 1) for every consumer alike. The clock runs from the producers'
release to the last event handled. For single-event frames and batches of 100, in one
run, side by side:

- ``raw``: ``recv`` (identity, frame) + ``msgpack.unpackb``, counting events (the same
  receive as the daemon's), and ``raw multipart``: the same with ``recv_multipart``,
  which costs twice as much a message (issue 18's first figures used it);
- ``wtwind``: the real `Server` (store on): receive, decode, validate, admission, seq,
  run state, detectors, series, snapshots;
- ``wtwind, no monitor``: the same with `RunMonitor` replaced by a stand-in that
  returns an empty state (``_NoMonitor``): the daemon's path without the detectors;
- ``raw+detectors``: the raw loop with each event fed to its run's `RunMonitor` and
  nothing else: the ceiling of any daemon that runs the detectors on every point (its
  ratio to ``raw`` bounds wtwind's).

``WTWIN_BENCH_CPU=1`` also prints the daemon process's CPU time per event in each socket run.

Then where the time goes, per stage, the same frames fed in this process (CPU
microseconds per event, best of 3; each stage its real code, alone): ``raw receive``
(two ``recv`` a message, as the raw loop) and ``receive`` (``Receiver.drain`` with a
do-nothing handler: the daemon's receive and inbound limiter), the frames queued on a
real socket before the clock starts; then without sockets ``decode`` (msgpack),
``validate`` (``wire.decode_frame`` less the msgpack decode), ``fast decode``
(``fast_decode.loss_frame``: decode and validate in one, straight to the body's items;
where it is compiled, the daemon's reading of these frames in place of ``decode`` and
``validate``), ``lookup`` (the run-table lookup, once per run per frame), ``admission`` (owner and
quotas once per frame, the emitter's mark, the seq check), ``monitor``
(``RunMonitor.update_loss``, fresh monitors fed the same events) and ``rest``
(``Server.handle_frame`` with the monitor's stand-in, less the stages before it, the
frames read by ``fast decode`` where it is compiled: run
state, series, alert policy, snapshots). Last, ``handle_frame`` without the monitor (its
stand-in) and with it. Each the best of 3 passes, a fresh daemon for each.
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
from wtwin.detect import MonitorState, RunMonitor
from wtwin.emitters import COMPILED, wire
from wtwin.emitters.fast_decode import loss_frame

PRODUCERS = 4
CPUS = {0, 1}
KINDS = (("single-event", 1), ("batch of 100", 100))


def _frames(run: str, n: int, batch: int) -> list[bytes]:
    evs = [{"v": 1, "type": "loss", "run": run, "seq": i + 1, "step": i + 1,
            "loss": 2.0 + 3.0 / (i + 1) ** 0.5 + 0.01 * ((i * 7919) % 13 - 6) / 6,
            "lr": 3e-4, "emitter": run} for i in range(n)]
    if batch == 1:
        return [wire.encode(e) for e in evs]
    return [wire.encode_batch(evs[i:i + batch], run, base=i + 1) for i in range(0, n, batch)]


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


def raw_loop(endpoint: str, n: int, batch: int, multipart: bool = False, detect: bool = False) -> float:
    """The raw ROUTER loop: the daemon's receive (``recv`` of the identity, then of the
    frame: Receiver.drain) or, with ``multipart``, ``recv_multipart`` (issue 18's first
    figures), and ``msgpack.unpackb``, counting events. With ``detect``, each event also
    goes through its run's `RunMonitor.update_loss` and nothing else (no validation, no
    run state, no series, no alert policy, no snapshots): the most a daemon that runs
    the detectors on every point can do on this transport."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.bind(endpoint)
    go, procs = _start_producers(endpoint, n, batch, "raw")
    total, count = n * PRODUCERS, 0
    recv, recv_multipart = sock.recv, sock.recv_multipart
    t0 = time.perf_counter()
    go.set()
    monitors: dict = {}
    while count < total:
        if multipart:
            _, frame = recv_multipart()
        else:
            recv()
            frame = recv()
        obj = msgpack.unpackb(frame, raw=False)
        if detect:
            for ev in obj["events"] if obj.get("type") == "batch" else (obj,):
                mon = monitors.get(ev["run"])
                if mon is None:
                    mon = monitors[ev["run"]] = RunMonitor("pretraining")
                mon.update_loss(ev["step"], ev["loss"], ev.get("lr"), ev.get("grad_norm"))
        count += len(obj["events"]) if obj.get("type") == "batch" else 1
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    sock.close()
    ctx.term()
    return total / elapsed


class _NoMonitor:
    """Bench only: stands in for `RunMonitor` to measure the daemon's path without the
    detectors (an empty state per loss, nothing to snapshot)."""

    def __init__(self, preset: str = "", **overrides) -> None:
        pass

    def update_loss(self, step, loss, lr=None, grad_norm=None):
        return MonitorState(step, loss)

    def update_eval(self, step, metrics):
        return None

    def snapshot(self, copy: bool = True) -> dict:
        return {}

    def restore(self, snap: dict) -> None:
        pass


class _monitor_off:
    """``with _monitor_off(on):`` the daemon builds ``_NoMonitor`` for its runs."""

    def __init__(self, off: bool) -> None:
        self.off = off

    def __enter__(self):
        from wtwin.daemon import run_state

        self.saved = run_state.RunMonitor
        if self.off:
            run_state.RunMonitor = _NoMonitor

    def __exit__(self, *exc):
        from wtwin.daemon import run_state

        run_state.RunMonitor = self.saved


def _config(endpoint: str, state_path: str):
    from wtwin.daemon import config as config_mod

    # the handlers' whole time for the producers, and a receive pipe that holds a
    # producer's every frame (64 KiB frames, 2 GiB): on a busy host a frame outlasts the
    # inbound limiter's free allowance and the pipe fills, and frames dropped there (never
    # re-sent by these producers) leave the run waiting for events that never come
    return config_mod.load(environ={"WTWIND_LISTEN__ENDPOINTS": endpoint, "WTWIND_HTTP__PORT": "0",
                                    "WTWIND_STATE__PATH": state_path,
                                    "WTWIND_LISTEN__PEER_LOOP_SHARE": "1", "WTWIND_LISTEN__LOOP_SHARE": "1",
                                    "WTWIND_LISTEN__MAX_FRAME_BYTES": str(2**16),
                                    "WTWIND_LISTEN__PEER_QUEUE_BYTES": str(2**31),
                                    "WTWIND_LISTEN__QUEUE_BYTES": str(2**31)})


def daemon_loop(endpoint: str, n: int, batch: int, state_path: str, monitor: bool = True) -> float:
    from wtwin.daemon.server import Server

    cfg = _config(endpoint, state_path)

    async def run() -> float:
        server = Server(cfg)
        await server.startup(asyncio.get_running_loop())
        go, procs = _start_producers(endpoint, n, batch, f"daemon-b{batch}-{int(monitor)}")
        total = n * PRODUCERS
        t0, c0 = time.perf_counter(), time.process_time()
        go.set()
        while server.stats.received["loss"] < total:
            if server.receiver.buckets.dropped_frames:
                raise RuntimeError(f"{server.receiver.buckets.dropped_frames} frames dropped by the inbound limiter")
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - t0
        if os.environ.get("WTWIN_BENCH_CPU"):
            print(f"  daemon cpu {(time.process_time() - c0) / total * 1e6:.1f} us/event, wall {elapsed / total * 1e6:.1f}")
        for p in procs:
            p.join()
        await server.shutdown()
        return total / elapsed

    with _monitor_off(not monitor):
        return asyncio.run(run())


def _cpu_us(fn, items, per: int, repeat: int = 3) -> float:
    """CPU microseconds per event of ``fn(item)`` over all items (``per`` events each);
    the best of ``repeat`` passes."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        for it in items:
            fn(it)
        best = min(best, time.process_time() - t0)
    return best / (len(items) * per) * 1e6


def _handle_all(frames: list[bytes], batch: int, monitor: bool, stages: bool = False) -> dict[str, float]:
    """``Server.handle_frame`` over ``frames`` on a fresh daemon (store on): CPU us per event;
    with ``stages``, then the run-table lookup and the admission a frame pays, alone."""
    from wtwin.daemon.server import Server

    tmp = tempfile.mkdtemp(prefix="wtwin-bench-frames-")
    cfg = _config(f"ipc://{tmp}/r.sock", f"{tmp}/s.db")

    async def run() -> dict[str, float]:
        server = Server(cfg)
        await server.startup(asyncio.get_running_loop())
        handle = server.handle_frame
        out = {"handle_frame": _cpu_us(lambda f: handle(b"bench", f), frames, batch, repeat=1)}
        if stages:  # the runs exist now
            decoded = [wire.decode_frame(f, 1 << 20) for f in frames]
            table, adm, link = server.table, server.admission, server.link
            out["lookup"] = _cpu_us(lambda d: table.get(d[0][0]["run"]), decoded, batch)
            out["admission"] = _cpu_us(lambda d: _admit(adm, link, table, d), decoded, batch)
        await server.shutdown()
        return out

    with _monitor_off(not monitor):
        return asyncio.run(run())


def _admit(adm, link, table, decoded) -> None:
    """What a frame pays for admission: owner and quotas once, the emitter's mark, and the
    seq check of each event (on a copy of the run's mark)."""
    events, _, b = decoded
    ev = events[0]
    em = ev.get("emitter", b and b.emitter)
    run = table.get(ev["run"])
    adm.admit(ev["run"], em, b"bench", adm.principal_of(ev.get("auth"), None), 0.0, run)
    run.marks.sent(em, b"bench", 0.0)
    hwm = {em: ev["seq"] - 1}
    if b is None:
        if ev["seq"] == hwm.get(em, 0) + 1:
            hwm[em] = ev["seq"]
        return
    seqs, first = b.columns["seq"], hwm.get(em, 0) + 1
    if seqs[0] == first and seqs[-1] == first + len(seqs) - 1 and seqs == tuple(range(first, first + len(seqs))):
        for seq in seqs:
            hwm[em] = seq


def _receive_us(frames: list[bytes], batch: int, daemon: bool, repeat: int = 3) -> float:
    """CPU us per event of receiving ``frames`` from 4 DEALERs in this process, queued
    before the clock starts: the daemon's `Receiver.drain` with a do-nothing handler
    (identity and frame, the limiter's take and charge), or the raw loop's two ``recv``
    (no decode in either); the best of ``repeat`` passes."""
    from wtwin.daemon.receiver import Receiver

    tmp = tempfile.mkdtemp(prefix="wtwin-bench-recv-")
    endpoint = f"ipc://{tmp}/r.sock"
    rx = Receiver(_config(endpoint, f"{tmp}/s.db").listen, slice_s=3600.0, ctx=zmq.Context())
    rx.sock.setsockopt(zmq.RCVHWM, 0)
    rx.bind()
    dealers = [rx.ctx.socket(zmq.DEALER) for _ in range(PRODUCERS)]
    for d in dealers:
        d.setsockopt(zmq.SNDHWM, 0)
        d.connect(endpoint)
    seen = [0]

    def handler(identity, frame):
        seen[0] += 1

    rx.handler = handler
    recv, best = rx.sock.recv, math.inf
    for _ in range(repeat):
        for i, f in enumerate(frames):
            dealers[i % PRODUCERS].send(f)
        while rx.sock.poll(0) == 0:   # the first frame is in
            time.sleep(0.001)
        time.sleep(0.2)               # and the rest (ipc: the peers' pipes fill at once)
        seen[0] = 0
        t0 = time.process_time()
        if daemon:
            while seen[0] < len(frames):
                rx.drain()
        else:
            for _ in frames:
                recv()
                recv()
        best = min(best, time.process_time() - t0)
    for d in dealers:
        d.close(linger=0)
    rx.close()
    rx.ctx.term()
    return best / (len(frames) * batch) * 1e6


def breakdown(n: int, batch: int, repeat: int = 3) -> dict[str, float]:
    """CPU us per event of each stage, the frames of 4 interleaved runs fed in process;
    each figure the best of ``repeat`` passes (a fresh daemon for each pass)."""
    per_run = [_frames(f"bench-{i}", n, batch) for i in range(PRODUCERS)]
    frames = [f for group in zip(*per_run) for f in group]
    out = {"raw receive (two recv)": _receive_us(frames, batch, daemon=False),
           "receive (Receiver.drain)": _receive_us(frames, batch, daemon=True),
           "decode": _cpu_us(msgpack.unpackb, frames, batch, repeat),
           "validate": _cpu_us(lambda f: wire.decode_frame(f, 1 << 20), frames, batch, repeat)}
    out["validate"] -= out["decode"]
    out["fast decode (decode + validate)"] = _cpu_us(lambda f: loss_frame(f, None), frames, batch, repeat)
    read = out["fast decode (decode + validate)"] if COMPILED else out["decode"] + out["validate"]
    bare = [_handle_all(frames, batch, monitor=False, stages=True) for _ in range(repeat)]
    out["lookup"] = min(r["lookup"] for r in bare)
    out["admission"] = min(r["admission"] for r in bare)
    events = [e for f in frames for e in wire.decode(f)[0]]
    best = math.inf
    for _ in range(repeat):
        monitors: dict[str, RunMonitor] = {}

        def monitor_only(e) -> None:
            mon = monitors.get(e["run"])
            if mon is None:
                mon = monitors[e["run"]] = RunMonitor("pretraining")
            mon.update_loss(e["step"], e["loss"], e.get("lr"), e.get("grad_norm"))

        best = min(best, _cpu_us(monitor_only, events, 1, repeat=1))
    out["monitor"] = best
    without = min(r["handle_frame"] for r in bare)
    out["rest"] = without - read - out["lookup"] - out["admission"]
    out["handle_frame without the monitor"] = without
    out["handle_frame, all of it"] = min(_handle_all(frames, batch, monitor=True)["handle_frame"]
                                         for _ in range(max(1, repeat - 1)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000, help="events per producer")
    ap.add_argument("--repeat", type=int, default=1, help="socket runs of each consumer")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity") and CPUS <= os.sched_getaffinity(0):
        os.sched_setaffinity(0, CPUS)  # the producers inherit it
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    tmp = tempfile.mkdtemp(prefix="wtwin-bench-")
    print(f"ingest: {PRODUCERS} producer processes x {args.events} loss events; this process "
          f"and the producers on cpus {cpus} (of {os.cpu_count()})")
    print(f"{'frames':<14}{'raw multipart':>14}{'raw':>10}{'wtwind':>9}{'ratio':>13}"
          f"{'no monitor':>12}{'ratio':>13}{'raw+detectors':>15}{'ratio':>7}"
          "   (ev/s; ratios vs raw multipart / raw; raw+detectors vs raw)")
    single_raw = None
    for label, batch in KINDS:
        for r in range(args.repeat):
            tag = f"{batch}-{r}"
            multi = raw_loop(f"ipc://{tmp}/rawm-{tag}.sock", args.events, batch, multipart=True)
            raw = raw_loop(f"ipc://{tmp}/raw-{tag}.sock", args.events, batch)
            ours = daemon_loop(f"ipc://{tmp}/d-{tag}.sock", args.events, batch, f"{tmp}/s-{tag}.db")
            bare = daemon_loop(f"ipc://{tmp}/n-{tag}.sock", args.events, batch, f"{tmp}/n-{tag}.db",
                               monitor=False)
            ceiling = raw_loop(f"ipc://{tmp}/rawd-{tag}.sock", args.events, batch, detect=True)
            print(f"{label:<14}{multi:>14,.0f}{raw:>10,.0f}{ours:>9,.0f}"
                  f"{f'{ours / multi:.2f} / {ours / raw:.2f}':>13}{bare:>12,.0f}"
                  f"{f'{bare / multi:.2f} / {bare / raw:.2f}':>13}{ceiling:>15,.0f}"
                  f"{ceiling / raw:>7.2f}", flush=True)
            if batch == 1 and single_raw is None:
                single_raw = raw
    print(f"\nwhere the time goes (frames fed in process, CPU us per event; the raw "
          f"single-event loop above took {1e6 / single_raw:.1f} us per event):")
    stages = {label: breakdown(args.events, batch) for label, batch in KINDS}
    print(f"  {'stage':<36}" + "".join(f"{label:>14}" for label, _ in KINDS))
    for stage in stages[KINDS[0][0]]:
        print(f"  {stage:<36}" + "".join(f"{stages[label][stage]:>14.2f}" for label, _ in KINDS))


if __name__ == "__main__":
    main()
