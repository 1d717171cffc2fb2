"""Alert delivery benchmark: latency to a webhook receiver; ingest with sinks down vs up.

1. Latency. A real ``wtwind`` subprocess with one webhook sink (signed) pointing at a
   receiver in this process. For each of N runs a raw DEALER sends a few finite losses,
   then the offending event (a NaN loss: the nonfinite alert fires on that event). The
   figure is the receiver's arrival time minus the offending event's send time (same
   host clock), per alert: median / p90 / max; on an idle daemon, then while another
   producer streams other runs at the paced rate.
2. Throughput. The real ``Server`` in this process (as tests/bench/ingest.py does), fed
   by 4 producer processes sending single-event frames over 1000 runs; every run sends
   one NaN loss, so 2000 alert transitions (firing, resolved) flow to both sinks during
   the stream. Same workload, side by side, interleaved: every sink up (webhook + Slack
   answered 200 by a receiver in its own process) and every sink down (both URLs refuse
   connections: every delivery fails and is retried). Wall rate and the daemon
   process's CPU time per event. Goal: within 5%.

    .venv/bin/python tests/bench/alert_latency.py [--alerts 50] [--events 40000] [--state sqlite|memory]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import zmq

from wtwin.emitters import wire
from wtwin.sinks.testing import Recorder

REPO = Path(__file__).resolve().parents[2]
SECRET = "whsec_" + base64.b64encode(b"bench-secret-for-the-webhook!!!!").decode()
PRODUCERS = 4
RUNS_PER_PRODUCER = 250
BUDGET = int(os.environ.get("BENCH_RECEIVER_BUDGET", "0"))  # 0: the receiver's default


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedRecorder:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.rec = asyncio.run_coroutine_threadsafe(Recorder().start(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.rec.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def sink_toml(webhook_url: str, slack_url: str) -> str:
    return f"""
[[sinks]]
type = "webhook"
name = "hook"
url = "{webhook_url}"
secret_env = "BENCH_SECRET"

[[sinks]]
type = "slack"
name = "slack"
url_env = "BENCH_SLACK_URL"
"""


# ---- 1. latency ---------------------------------------------------------------------------
def latency(n_alerts: int, state: str, tmp: Path, load: float = 0.0) -> list[float]:
    recv = ThreadedRecorder()
    port, ipc = free_port(), f"ipc://{tmp}/lat-{int(load)}.sock"
    cfg = tmp / "lat.toml"
    cfg.write_text(sink_toml(f"http://127.0.0.1:{recv.rec.port}/hook", f"http://127.0.0.1:{recv.rec.port}/slack"))
    env = dict(os.environ, BENCH_SECRET=SECRET, BENCH_SLACK_URL=f"http://127.0.0.1:{recv.rec.port}/slack",
               WTWIND_LISTEN__ENDPOINTS=ipc, WTWIND_HTTP__PORT=str(port), WTWIND_LOG__LEVEL="warning",
               WTWIND_STATE__PATH=str(tmp / f"lat-{int(load)}.db"), WTWIND_STATE__ENABLED=str(state == "sqlite").lower())
    log = (tmp / "lat.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "wtwin.daemon.cli", "--config", str(cfg)], env=env,
                            stdout=log, stderr=log)
    try:
        _wait(lambda: _ready(port), 30)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.connect(ipc)
        background = None
        if load:  # other runs streaming at `load` events/s while the alerts are timed
            go = mp.Event()
            background = mp.Process(target=_producer, args=(ipc, "bg", int(load * 600), go, load), daemon=True)
            background.start()
            time.sleep(1.0)
            go.set()
            time.sleep(1.0)
        out = []
        for i in range(n_alerts):
            run, seq = f"lat-{i}", 0
            for step in range(1, 6):
                seq += 1
                sock.send(wire.encode({"v": 1, "type": "loss", "run": run, "seq": seq, "step": step,
                                       "loss": 3.0 - 0.1 * step}))
            time.sleep(0.02)  # let the finite losses land first: the NaN alone is timed
            sent = time.time()
            sock.send(wire.encode({"v": 1, "type": "loss", "run": run, "seq": seq + 1, "step": 6,
                                   "loss": float("nan")}))
            arrived = _wait(lambda: _arrival(recv, run), 10)
            out.append(arrived - sent)
        sock.close(0)
        if background is not None:
            background.terminate()
        return out
    finally:
        proc.terminate()
        proc.wait(20)
        recv.close()


def _arrival(recv: ThreadedRecorder, run: str) -> float | None:
    for r in list(recv.rec.requests):
        if r.path == "/hook" and json.loads(r.body)["alerts"][0]["labels"]["run"] == run:
            return r.at
    return None


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=0.5) as r:
            return r.status == 200
    except OSError:
        return False


def _wait(pred, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        val = pred()
        if val:
            return val
        time.sleep(0.001)
    raise TimeoutError("benchmark condition not reached")


# ---- 2. throughput with sinks up vs down --------------------------------------------------
def _frames(tag: str, n: int) -> list[bytes]:
    """n single-event loss frames over RUNS_PER_PRODUCER runs; each run has one NaN (alerts)."""
    out, nan_step = [], max(2, n // RUNS_PER_PRODUCER // 3)  # a third into the stream
    for i in range(n):
        r, step = i % RUNS_PER_PRODUCER, i // RUNS_PER_PRODUCER + 1
        loss = float("nan") if step == nan_step else 2.0 + 3.0 / step ** 0.5
        out.append(wire.encode({"v": 1, "type": "loss", "run": f"{tag}-{r}", "seq": step, "step": step,
                                "loss": loss, "emitter": f"{tag}-{r}"}))
    return out


def _producer(endpoint: str, tag: str, n: int, go, rate: float = 0.0) -> None:
    """Send as fast as possible, or paced at ``rate`` events/s (0: unpaced)."""
    frames = _frames(tag, n)
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 5000)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    go.wait()
    t0 = time.perf_counter()
    for i, f in enumerate(frames):
        sock.send(f)
        if rate and i % 50 == 49:
            ahead = t0 + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
    sock.close()


def _receiver(port: int, ready) -> None:
    """A healthy endpoint in its own process: 200 ok to everything."""
    from aiohttp import web

    async def ok(request):
        await request.read()
        return web.Response(text="ok")

    async def serve():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", ok)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(serve())


def throughput(endpoint: str, n: int, sinks_up: bool, state: str, tmp: Path, label: str,
               rate: float = 0.0) -> tuple[float, float, dict]:
    from wtwin.daemon import config as config_mod
    from wtwin.daemon.server import Server

    held = socket.socket()  # bound, never listening: connections are refused, the port stays ours
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    receiver = None
    if sinks_up:  # a receiver process listens there instead
        held.close()
        ready = mp.Event()
        receiver = mp.Process(target=_receiver, args=(port, ready), daemon=True)
        receiver.start()
        ready.wait(30)
    base = f"http://127.0.0.1:{port}"
    cfg_path = tmp / f"tp-{label}.toml"
    cfg_path.write_text(sink_toml(f"{base}/hook", f"{base}/slack") + "\n[delivery]\ndrain_timeout_s = 0.5\n")
    environ = {"WTWIND_LISTEN__ENDPOINTS": endpoint, "WTWIND_HTTP__PORT": "0",
               "WTWIND_STATE__PATH": str(tmp / f"tp-{label}.db"),
               "WTWIND_STATE__ENABLED": str(state == "sqlite").lower()}
    os.environ.update(BENCH_SECRET=SECRET, BENCH_SLACK_URL=f"{base}/slack")

    async def run() -> tuple[float, float, dict]:
        server = Server(config_mod.load(cfg_path, environ=environ))
        if BUDGET:
            server.receiver.budget = BUDGET
        await server.startup(asyncio.get_running_loop())
        go = mp.Event()
        procs = [mp.Process(target=_producer, args=(endpoint, f"{label}{i}", n, go, rate / PRODUCERS))
                 for i in range(PRODUCERS)]
        for p in procs:
            p.start()
        await asyncio.sleep(1.0)  # producers connect and pre-encode before the clock starts
        total = n * PRODUCERS
        t0, c0 = time.perf_counter(), time.process_time()
        go.set()
        while server.stats.received["loss"] < total:
            await asyncio.sleep(0.001)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        counters = {f"{s}/{o}": v for (s, o), v in server.delivery.counters.values.items() if v}
        counters["alerts"] = sum(server.stats.alerts.values())
        for p in procs:
            p.join()
        await server.shutdown()
        return total / elapsed, cpu / total * 1e6, counters

    try:
        return asyncio.run(run())
    finally:
        held.close()
        if receiver is not None:
            receiver.terminate()
            receiver.join(5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alerts", type=int, default=50)
    ap.add_argument("--events", type=int, default=10_000, help="events per producer (x4)")
    ap.add_argument("--repeats", type=int, default=3, help="throughput runs per condition, interleaved")
    ap.add_argument("--state", choices=("sqlite", "memory"), default="sqlite")
    ap.add_argument("--paced", type=float, default=2000.0, help="events/s of the paced comparison")
    ap.add_argument("--only", choices=("latency", "throughput"), help="run one part only")
    args = ap.parse_args()
    from wtwin.daemon.logsetup import configure

    configure("error", "console")  # the in-process Server of part 2 would log every alert
    tmp = Path(tempfile.mkdtemp(prefix="wtwin-bench-alerts-"))
    if args.only != "throughput":
        report_latency(args, tmp)
    if args.only != "latency":
        report_throughput(args, tmp)


def report_latency(args, tmp: Path) -> None:
    print(f"alert latency, NaN loss event -> signed webhook at receiver ({args.alerts} alerts, "
          f"outbox={args.state}, cpus={os.cpu_count()}):")
    for load in (0.0, args.paced):
        ms = sorted(x * 1000 for x in latency(args.alerts, args.state, tmp, load))
        what = "idle daemon" if not load else f"under {load:,.0f} ev/s of other runs"
        print(f"  {what:<32} median {statistics.median(ms):6.1f} ms   p90 {ms[int(0.9 * (len(ms) - 1))]:6.1f} ms"
              f"   max {ms[-1]:6.1f} ms")


def report_throughput(args, tmp: Path) -> None:
    print(f"\ningest with alerts flowing: {PRODUCERS} producers x {args.events} events, "
          f"{PRODUCERS * RUNS_PER_PRODUCER} runs, cpus={os.cpu_count()}, outbox={args.state}")
    for title, rate in (("saturated (producers unpaced)", 0.0), (f"paced at {args.paced:,.0f} ev/s", args.paced)):
        print(f"  {title}:")
        compare(args, tmp, rate)


def compare(args, tmp: Path, rate: float) -> None:
    rates: dict[str, list[float]] = {"up": [], "down": []}
    cpus: dict[str, list[float]] = {"up": [], "down": []}
    for i in range(args.repeats):
        for cond in (("up", "down") if i % 2 == 0 else ("down", "up")):
            tag = f"{cond}{i}{'p' if rate else 's'}"
            ev_s, us, counters = throughput(f"ipc://{tmp}/tp-{tag}.sock", args.events, cond == "up",
                                            args.state, tmp, tag, rate)
            rates[cond].append(ev_s)
            cpus[cond].append(us)
            print(f"    run {i} sinks {cond:<5} {ev_s:>9,.0f} ev/s  {us:6.1f} us CPU/event   "
                  f"in the window: {dict(sorted(counters.items()))}")
    up, down = statistics.median(rates["up"]), statistics.median(rates["down"])
    cu, cd = statistics.median(cpus["up"]), statistics.median(cpus["down"])
    print(f"    median: sinks up {up:,.0f} ev/s ({cu:.1f} us CPU/event), sinks down {down:,.0f} ev/s "
          f"({cd:.1f} us CPU/event); down/up throughput = {down / up:.3f}, CPU = {cd / cu:.3f}")


if __name__ == "__main__":
    main()
