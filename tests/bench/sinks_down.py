"""Ingest with every sink down vs up: same events, one run, interleaved repeats.

Goal (issue 5): event throughput within 5% while every sink is down. Three conditions,
each sink (a signed webhook and a Slack sink, the SQLite outbox on as by default):

- ``up``: both URLs answered ``200 ok`` by a receiver in its own process;
- ``refused``: both URLs point at a bound, never-listening port: every attempt is
  refused at once and retried with backoff;
- ``blackhole``: both URLs point at a listening socket that never accepts: every
  attempt connects, sends, and hangs until the sink's ``timeout_s`` (10 s default).

Each measurement is a fresh process running the real ``Server`` (as ``ingest.py``
does) at the daemon's default log level, fed by 4 producer processes sending
single-event loss frames over 1,000 runs; every run sends one NaN a third of the way
in, so about 2,000 alert transitions (firing + resolved) reach both sinks during the
stream. The window runs from the producers' release to the last event handled
(taken inside ``handle_frame``, no polling). Figures: wall ev/s, and the daemon
process's CPU time per event (all its threads: loop, store writer, ZeroMQ), with the
loop thread's share apart. Repeats are interleaved in rotating order (up, refused,
blackhole / refused, blackhole, up / ...); each repeat gives a down/up ratio from
runs minutes apart at most; the report is the median ratio and its min..max.

The store's periodic snapshots are set to every 60 s by default (``--flush-interval``):
with the daemon's 0.5 s, every dirty run is snapshotted on the loop twice a second, so
that cost follows the window's *duration*, not its events; a run slowed by the machine's
other load snapshots more and reports more CPU per event, which feeds any noise back
into the comparison. With 60 s the snapshots left are those each alert forces (the same
in every condition). Paced below capacity (``--paced``), the offered rate fixes the
window and ``--flush-interval 0`` (the default config) compares fairly.

The code under test is copied once at the start, so edits made in the working tree
while the benchmark runs do not reach later repeats (``--code DIR``: another tree).

    .venv/bin/python tests/bench/sinks_down.py [--events 10000] [--repeats 5] [--paced 0] [--flush-interval 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PRODUCERS = 4
RUNS_PER_PRODUCER = 250
CONDITIONS = ("up", "refused", "blackhole")
SECRET = "whsec_YmVuY2gtc2VjcmV0LWZvci10aGUtd2ViaG9vayEhISE="

SINKS_TOML = """
[[sinks]]
type = "webhook"
name = "hook"
url = "{base}/hook"
secret_env = "BENCH_SECRET"

[[sinks]]
type = "slack"
name = "slack"
url_env = "BENCH_SLACK_URL"

[delivery]
drain_timeout_s = 0.5
"""


# ---- the parent: endpoints, interleaving, report ------------------------------------------
def snapshot_code(dest: Path, src: Path = REPO) -> Path:
    """Copy the three packages as a regular ``wtwin`` package; PYTHONPATH puts it first."""
    pkg = dest / "wtwin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("daemon", "emitters", "sinks"):
        shutil.copytree(src / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


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


class Endpoints:
    """One base URL per condition, held for the whole benchmark."""

    def __init__(self) -> None:
        self.refused = socket.socket()  # bound, never listening: connect() is refused
        self.refused.bind(("127.0.0.1", 0))
        self.hole = socket.socket()  # listening, never accepting: requests hang until timeout
        self.hole.bind(("127.0.0.1", 0))
        self.hole.listen(4096)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            up_port = s.getsockname()[1]
        ready = mp.get_context("spawn").Event()
        self.receiver = mp.get_context("spawn").Process(target=_receiver, args=(up_port, ready), daemon=True)
        self.receiver.start()
        if not ready.wait(60):
            raise RuntimeError("receiver did not start")
        self.url = {"up": f"http://127.0.0.1:{up_port}",
                    "refused": f"http://127.0.0.1:{self.refused.getsockname()[1]}",
                    "blackhole": f"http://127.0.0.1:{self.hole.getsockname()[1]}"}

    def close(self) -> None:
        self.receiver.terminate()
        self.receiver.join(5)
        self.refused.close()
        self.hole.close()


def measure(code: Path, tmp: Path, cond: str, url: str, args, tag: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code), BENCH_SECRET=SECRET, BENCH_SLACK_URL=f"{url}/slack")
    cmd = [sys.executable, str(HERE / "sinks_down.py"), "--child", cond, "--url", url, "--tmp", str(tmp),
           "--tag", tag, "--events", str(args.events), "--paced", str(args.paced),
           "--flush-interval", str(args.flush_interval)]
    with (tmp / f"{tag}.log").open("wb") as log:
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log, timeout=900, cwd=tmp)
    if out.returncode != 0:
        raise RuntimeError(f"{tag} failed ({out.returncode}); see {tmp / (tag + '.log')}")
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}..{max(xs):.3f}]"


def report(results: dict[str, list[dict]], args) -> None:
    print(f"  per run: ev/s, us CPU/event (process; loop thread), deliveries in the window")
    ups = results["up"]
    for cond in CONDITIONS:
        ev = [r["ev_s"] for r in results[cond]]
        cpu = [r["cpu_us"] for r in results[cond]]
        loop = [r["loop_us"] for r in results[cond]]
        print(f"  {cond:<10} median {statistics.median(ev):8,.0f} ev/s  {statistics.median(cpu):6.1f} us CPU/event"
              f"  (loop thread {statistics.median(loop):6.1f})  alerts fired {results[cond][0]['alerts']}")
    for cond in CONDITIONS[1:]:
        tp = [d["ev_s"] / u["ev_s"] for d, u in zip(results[cond], ups)]
        cpu = [d["cpu_us"] / u["cpu_us"] for d, u in zip(results[cond], ups)]
        loop = [d["loop_us"] / u["loop_us"] for d, u in zip(results[cond], ups)]
        print(f"  {cond}/up per repeat, median [min..max] of {len(tp)}: throughput {_spread(tp)}, "
              f"CPU/event {_spread(cpu)}, loop-thread CPU/event {_spread(loop)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000, help="events per producer (x4)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--paced", type=float, default=0.0, help="offered ev/s in all (0: as fast as possible)")
    ap.add_argument("--flush-interval", type=float, default=60.0,
                    help="[state] flush_interval_s; 0: the daemon's default (0.5 s), whose snapshot "
                         "cost grows with the window's duration (see the module doc)")
    ap.add_argument("--code", type=Path, default=REPO,
                    help="a tree holding daemon/, sinks/, emitters/ to measure (default: this checkout), "
                         "e.g. an earlier revision from `git archive REV daemon sinks emitters | tar -x -C DIR`")
    ap.add_argument("--child", choices=CONDITIONS)
    ap.add_argument("--url")
    ap.add_argument("--tmp")
    ap.add_argument("--tag")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="wtwin-bench-sinks-"))
    code = snapshot_code(tmp / "code", args.code)
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() if args.code == REPO else str(args.code)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "daemon", "sinks", "emitters"],
                           capture_output=True, text=True).stdout.split("\n")
    print(f"ingest with every sink down vs up: {PRODUCERS} producers x {args.events} events, "
          f"{PRODUCERS * RUNS_PER_PRODUCER} runs, {'unpaced' if not args.paced else f'paced at {args.paced:,.0f} ev/s'}, "
          f"flush_interval_s={args.flush_interval or 'default'}, "
          f"cpus={os.cpu_count()}, load {os.getloadavg()[0]:.1f}, code {rev}"
          f"{' + ' + str(sum(1 for d in dirty if d)) + ' uncommitted files' if any(dirty) and args.code == REPO else ''}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    ends = Endpoints()
    results: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    try:
        for i in range(args.repeats):
            order = CONDITIONS[i % 3:] + CONDITIONS[:i % 3]
            for cond in order:
                r = measure(code, tmp, cond, ends.url[cond], args, f"{cond}{i}")
                results[cond].append(r)
                print(f"    repeat {i} {cond:<10} {r['ev_s']:8,.0f} ev/s  {r['cpu_us']:6.1f} us CPU/event "
                      f"(loop {r['loop_us']:6.1f})  load {os.getloadavg()[0]:.1f}  {r['deliveries']}", flush=True)
    finally:
        ends.close()
    report(results, args)


# ---- the child: one measurement ------------------------------------------------------------
def _frames(tag: str, n: int) -> list[bytes]:
    """n single-event loss frames over RUNS_PER_PRODUCER runs; each run has one NaN (alerts)."""
    from wtwin.emitters import wire

    out, nan_step = [], max(2, n // RUNS_PER_PRODUCER // 3)  # a third into the stream
    for i in range(n):
        r, step = i % RUNS_PER_PRODUCER, i // RUNS_PER_PRODUCER + 1
        loss = float("nan") if step == nan_step else 2.0 + 3.0 / step ** 0.5
        out.append(wire.encode({"v": 1, "type": "loss", "run": f"{tag}-{r}", "seq": step, "step": step,
                                "loss": loss, "emitter": f"{tag}-{r}"}))
    return out


def _producer(endpoint: str, tag: str, n: int, go, rate: float = 0.0) -> None:
    """Send as fast as ZeroMQ allows, or paced at ``rate`` events/s (0: unpaced)."""
    import zmq

    frames = _frames(tag, n)
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 5000)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    go.wait()
    t0 = time.perf_counter()
    for i, f in enumerate(frames):
        sock.send(f)
        if rate and i % 25 == 24:
            ahead = t0 + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
    sock.close()


def child(args) -> dict:
    from wtwin.daemon import config as config_mod
    from wtwin.daemon.logsetup import configure
    from wtwin.daemon.server import Server

    tmp = Path(args.tmp)
    endpoint = f"ipc://{tmp}/{args.tag}.sock"
    go = mp.Event()  # producers are forked before the daemon starts any thread
    procs = [mp.Process(target=_producer, args=(endpoint, f"{args.tag}p{i}", args.events, go,
                                                args.paced / PRODUCERS)) for i in range(PRODUCERS)]
    for p in procs:
        p.start()
    cfg_path = tmp / f"{args.tag}.toml"
    cfg_path.write_text(SINKS_TOML.format(base=args.url))
    environ = {"WTWIND_LISTEN__ENDPOINTS": endpoint, "WTWIND_HTTP__PORT": "0",
               "WTWIND_STATE__PATH": str(tmp / f"{args.tag}.db"),
               "BENCH_SECRET": SECRET, "BENCH_SLACK_URL": f"{args.url}/slack"}
    if args.flush_interval:
        environ["WTWIND_STATE__FLUSH_INTERVAL_S"] = str(args.flush_interval)
    cfg = config_mod.load(cfg_path, environ=environ)
    configure(cfg.log.level, "json")  # the daemon's default level; stderr goes to a file
    total = args.events * PRODUCERS

    class Timed(Server):
        """The real server; notes the clocks when the last event has been handled."""

        end: tuple | None = None

        def handle_frame(self, identity: bytes, frame: bytes) -> None:
            super().handle_frame(identity, frame)
            if self.end is None and self.stats.received["loss"] >= total:
                self.end = (time.perf_counter(), time.process_time(), time.thread_time(), self._counts())
                self.finished.set()

        def _counts(self) -> dict:
            out = {f"{s}/{o}": v for (s, o), v in self.delivery.counters.values.items() if v}
            out["commits"] = self.store.writer.commits
            return out

    async def run() -> dict:
        server = Timed(cfg)
        server.finished = asyncio.Event()
        await server.startup(asyncio.get_running_loop())
        await asyncio.sleep(1.5)  # producers connect and pre-encode before the clock starts
        start = (time.perf_counter(), time.process_time(), time.thread_time(), server._counts())
        go.set()
        await server.finished.wait()
        (t1, c1, m1, n1), (t0, c0, m0, n0) = server.end, start
        alerts = sum(server.stats.alerts.values())
        for p in procs:
            p.join()
        await server.shutdown()
        return {"ev_s": total / (t1 - t0), "cpu_us": (c1 - c0) / total * 1e6, "loop_us": (m1 - m0) / total * 1e6,
                "alerts": alerts, "deliveries": {k: v - n0.get(k, 0) for k, v in n1.items()}}

    return asyncio.run(run())


if __name__ == "__main__":
    main()
