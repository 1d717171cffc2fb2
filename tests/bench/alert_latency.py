"""Alert delivery benchmark: latency from the offending event to a webhook receiver.

A real ``wtwind`` subprocess with one webhook sink (signed) pointing at a receiver in
this process. For each of N runs a raw DEALER sends a few finite losses, then the
offending event (a NaN loss: the nonfinite alert fires on that event). The figure is
the receiver's arrival time minus the offending event's send time (same host clock),
per alert: median / p90 / max; on an idle daemon, then while another producer streams
other runs at the paced rate. Ingest with every sink down vs up is
``tests/bench/sinks_down.py``.

``--fsyncs`` also counts the daemon's fsync/fdatasync calls during the idle phase
in one more idle pass, not timed (``strace -f -c`` attached once the daemon is ready,
detached after the last alert arrived), and prints them per alert: what each alert
costs the disk.

    .venv/bin/python tests/bench/alert_latency.py [--alerts 50] [--paced 2000] [--state sqlite|memory] [--fsyncs]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/: http_recorder

from sinks_down import _producer  # noqa: E402  the background load: same frames as the sinks-down benchmark
from wtwin.emitters import wire  # noqa: E402
from http_recorder import Recorder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SECRET = "whsec_" + base64.b64encode(b"bench-secret-for-the-webhook!!!!").decode()


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


# ---- latency ------------------------------------------------------------------------------
def latency(n_alerts: int, state: str, tmp: Path, load: float = 0.0, fsyncs: list | None = None) -> list[float]:
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
        tracer = _strace(proc.pid, tmp) if fsyncs is not None else None
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
        if tracer is not None:
            time.sleep(0.5)  # outcome writes of the last delivery land too
            fsyncs.append(_strace_count(*tracer))
        sock.close(0)
        if background is not None:
            background.terminate()
        return out
    finally:
        proc.terminate()
        proc.wait(20)
        recv.close()


def _strace(pid: int, tmp: Path):
    """strace attached to the daemon and all its threads, counting fsync-family calls."""
    out = tmp / f"strace-{pid}.txt"
    tracer = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(out),
                               "-p", str(pid)], stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached to every thread before the first alert
    return tracer, out


def _strace_count(tracer: subprocess.Popen, out: Path) -> int:
    tracer.send_signal(2)  # SIGINT: detach and write the summary
    tracer.wait(20)
    n = 0
    for line in out.read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in ("fsync", "fdatasync"):
            n += int(parts[3])
    return n


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alerts", type=int, default=50)
    ap.add_argument("--state", choices=("sqlite", "memory"), default="sqlite")
    ap.add_argument("--paced", type=float, default=2000.0, help="events/s of other runs in the loaded case")
    ap.add_argument("--fsyncs", action="store_true", help="count fsync calls per alert (idle phase, strace)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wtwin-bench-alerts-"))
    report_latency(args, tmp)


def report_latency(args, tmp: Path) -> None:
    print(f"alert latency, NaN loss event -> signed webhook at receiver ({args.alerts} alerts, "
          f"outbox={args.state}, cpus={os.cpu_count()}):")
    for load in (0.0, args.paced):
        ms = sorted(x * 1000 for x in latency(args.alerts, args.state, tmp, load))
        what = "idle daemon" if not load else f"under {load:,.0f} ev/s of other runs"
        print(f"  {what:<32} median {statistics.median(ms):6.1f} ms   p90 {ms[int(0.9 * (len(ms) - 1))]:6.1f} ms"
              f"   max {ms[-1]:6.1f} ms")
    if args.fsyncs:  # a separate idle pass: strace slows every syscall, so it is not timed
        counted: list = []
        latency(args.alerts, args.state, tmp, 0.0, counted)
        print(f"  {'fsync+fdatasync, idle daemon':<32} {counted[0]} calls for {args.alerts} alerts = "
              f"{counted[0] / args.alerts:.2f} per alert")


if __name__ == "__main__":
    main()
