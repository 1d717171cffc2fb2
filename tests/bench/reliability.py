"""Reliability figures: restart time with 1k runs stored, events lost across a SIGKILL,
ingest throughput with the store on vs off (side by side, one run).

    .venv/bin/python tests/bench/reliability.py [--runs 1000] [--events 20000]

Everything is real: the wtwind subprocess and its SQLite store for the first two, the
in-process `Server` fed by producer processes over ipc for the third (as ingest.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from helpers import Daemon, wait_for  # noqa: E402
from wtwin.emitters import wire  # noqa: E402
from wtwin.emitters.emitter import Emitter  # noqa: E402

PRODUCERS = 4


def seed_runs(db: Path, n: int) -> None:
    """``n`` stored runs, each with the snapshot of a real run after 1,000 loss events."""
    from wtwin.daemon.run_state import RunState
    from wtwin.daemon.store import codec
    from wtwin.daemon.store.db import open_db

    run = RunState("template", preset="pretraining", cooldown_s=60.0, now=time.time())
    for step in range(1, 1001):
        run.observe({"type": "loss", "step": step, "loss": curve(step)}, time.time())
    run.marks.admit_seq("em-template", 1000, None)
    row = codec.encode(run)
    conn, lock = open_db(str(db))
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                     [(f"m{i}", "running", row[2], row[3], now, now, 1000, row[7], now) for i in range(n)])
    conn.execute("COMMIT")
    conn.close()
    lock.release()


def restart_time(runs: int, tmp: Path, repeat: int) -> dict:
    """Seconds from spawning `wtwind` to its first 200 on /readyz, with an empty store and
    with ``runs`` stored runs (each the snapshot of a run after 1,000 loss events),
    interleaved ``repeat`` times; per case a list of (total, store open + load, daemon CPU
    seconds at ready). /readyz is polled every 50 ms.

    Twice: with bytecode cached, as an installed wtwind runs (pip compiles at install;
    here a private PYTHONPYCACHEPREFIX warmed by one start), and compiling every module
    at each start, as this checkout does under PYTHONDONTWRITEBYTECODE=1."""
    cached = ({"PYTHONPYCACHEPREFIX": str(tmp / "pycache")}, ("PYTHONDONTWRITEBYTECODE",))
    compiled = ({"PYTHONDONTWRITEBYTECODE": "1"}, ())
    cases = {}
    for label, env in (("bytecode cached", cached), ("compiled at start", compiled)):
        cases[f"empty store, {label}"] = (0, env)
        cases[f"{runs} runs stored, {label}"] = (runs, env)
    for n in (0, runs):
        seed_runs(tmp / f"restart-{n}.db", n)
    _start_stop(tmp / "warm", tmp / "warm.db", 0, cached)  # fills the bytecode cache
    out: dict[str, list] = {label: [] for label in cases}
    for i in range(repeat):
        for k, (label, (n, env)) in enumerate(cases.items()):
            out[label].append(_start_stop(tmp / f"r{i}-{k}", tmp / f"restart-{n}.db", n, env))
    return out


def _start_stop(where: Path, db: Path, n: int, env: tuple[dict, tuple]) -> tuple[float, float, float]:
    where.mkdir()
    d = Daemon(extra_env={"WTWIND_STATE__PATH": str(db), **env[0]}, tmpdir=str(where))
    for name in env[1]:
        d.env.pop(name, None)
    t0 = time.monotonic()
    d.start(timeout=120)
    total = time.monotonic() - t0
    cpu = _cpu_s(d.proc.pid)
    restored = d.metrics()[("wtwind_store_restored_runs", ())]
    assert restored == n, restored
    assert d.stop() == 0
    return total, _phase(d.log(), "store_opened", "state_loaded"), cpu


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far: robust to a busy machine."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _phase(log: str, first: str, last: str) -> float:
    """Seconds between two of the daemon's JSON log events (the store's share of startup)."""
    from datetime import datetime

    at = {}
    for line in log.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") in (first, last) and rec["event"] not in at:
            at[rec["event"]] = datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00"))
    return (at[last] - at[first]).total_seconds()


def curve(step: int) -> float:
    return 2.0 + 5.0 / step ** 0.5 + 0.01 * ((step * 7919) % 13 - 6) / 6


def state_show(db: Path, run: str) -> dict | None:
    """The stored run (`wtwind state show --json`), None when the store has no such run."""
    out = subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", "state", "show", run, "--json"],
                         env=dict(os.environ, WTWIND_STATE__PATH=str(db)), capture_output=True, text=True)
    if out.returncode == 1 and "no run" in (out.stderr + out.stdout):
        return None
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _received(d: Daemon, kind: str) -> float:
    return d.metrics().get(("wtwind_events_received_total", (("type", kind),)), 0)


def loss_across_sigkill(events: int, tmp: Path, resend_size: int) -> dict:
    """Stream ``events`` losses, SIGKILL the daemon half way, emit the rest while it is
    down, restart it: how many losses does the store say were processed, once each?

    The run's ``run_start`` is persisted before the stream begins and its ``run_end`` is
    waited for after it, so the count of processed losses is exact: the snapshot's
    ``events`` minus those two. Without a resend buffer, what was in flight at the kill
    (or unacknowledged in the daemon's memory) is gone; with one, nothing should be."""
    db = tmp / f"kill-{resend_size}.db"
    (tmp / f"k{resend_size}").mkdir(parents=True)
    d = Daemon(extra_env={"WTWIND_STATE__PATH": str(db)}, tmpdir=str(tmp / f"k{resend_size}")).start()
    emit = Emitter(d.tcp, run="kill", heartbeat_s=3600, resend_size=resend_size,
                   queue_size=2 * events)  # the emitter's own queue bound is not what is measured
    wait_for(lambda: state_show(db, "kill"), timeout=30, interval=0.1, what="run_start persisted")
    for step in range(1, events // 2 + 1):
        emit.loss(step, curve(step))
    wait_for(lambda: _received(d, "loss") > events / 4, timeout=60, what="a quarter processed")
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d._log.close()
    for step in range(events // 2 + 1, events + 1):
        emit.loss(step, curve(step))
    d.start()
    acked = emit.flush(60)
    emit.close(timeout=5)
    got_end = _wait_quiet(d)
    assert d.stop() == 0
    snap = state_show(db, "kill")["snapshot"]
    processed = snap["events"] - 1 - int(got_end)  # minus run_start and run_end
    return {"emitted": events, "processed_once": processed, "lost": events - processed,
            "acked_all": acked, "evicted": emit.stats.get("resend_evicted", 0)}


def _wait_quiet(d: Daemon) -> bool:
    """Wait for the run's run_end (without the resend buffer it may itself be lost: then
    for 3 s of silence); True if it arrived."""
    last, since = -1.0, time.monotonic()
    deadline = since + 60
    while time.monotonic() < deadline:
        if _received(d, "run_end") >= 1:
            return True
        n = _received(d, "loss")
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > 3.0:
            return False
        time.sleep(0.1)
    return False


def _producer(endpoint: str, run: str, n: int, go) -> None:
    from _producers import send_when_released

    evs = [{"v": 1, "type": "loss", "run": run, "seq": i + 1, "step": i + 1, "loss": curve(i + 1),
            "lr": 3e-4} for i in range(n)]
    frames = [wire.encode_batch(evs[i:i + 100], run, base=i + 1) for i in range(0, n, 100)]
    send_when_released(endpoint, frames, go)


def throughput(endpoint: str, n: int, state_env: dict) -> tuple[float, float]:
    """(wall-clock ev/s, ev per CPU-second of the daemon process: robust to a busy box)."""
    from wtwin.daemon import config as config_mod
    from wtwin.daemon.server import Server

    cfg = config_mod.load(environ={"WTWIND_LISTEN__ENDPOINTS": endpoint, "WTWIND_HTTP__PORT": "0",
                                   **state_env})

    async def run() -> float:
        server = Server(cfg)
        await server.startup(asyncio.get_running_loop())
        go = mp.Event()
        tag = "on" if cfg.state.enabled else "off"
        procs = [mp.Process(target=_producer, args=(endpoint, f"{tag}-{i}", n, go)) for i in range(PRODUCERS)]
        for p in procs:
            p.start()
        await asyncio.sleep(1.0)
        total = n * PRODUCERS
        t0, c0 = time.perf_counter(), time.process_time()
        go.set()
        while server.stats.received["loss"] < total:
            await asyncio.sleep(0.001)
        await server.shutdown()  # the store's final flush is part of its cost
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        for p in procs:
            p.join()
        return total / elapsed, total / cpu

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000, help="runs in the store for the restart")
    ap.add_argument("--events", type=int, default=20_000, help="events streamed across the SIGKILL")
    ap.add_argument("--kill-repeat", type=int, default=3,
                    help="SIGKILL cases, each with the resend buffer on and off")
    ap.add_argument("--ingest", type=int, default=5_000, help="events per producer, throughput")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved repetitions (restart, on/off)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wtwin-bench-rel-"))
    print(f"reliability bench, cpus={os.cpu_count()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    for label, pairs in restart_time(args.runs, tmp, args.repeat).items():
        totals, loads, cpus = ([p[k] for p in pairs] for k in range(3))
        print(f"restart to /readyz, {label:<36} median of {len(pairs)} {med(totals):5.2f} s "
              f"(all: {', '.join(f'{t:.2f}' for t in totals)}); daemon CPU {med(cpus):.2f} s; "
              f"opening + loading the store {med(loads):.3f} s")
    for i, rs in [(i, rs) for i in range(args.kill_repeat) for rs in (20_000, 0)]:
        r = loss_across_sigkill(args.events, tmp / f"kill{i}", rs)
        print(f"SIGKILL mid-stream, resend_size={rs:<6} emitted {r['emitted']}, processed once "
              f"{r['processed_once']}, lost {r['lost']} (acked all: {r['acked_all']}, evicted {r['evicted']})")
    walls, cpus = {"on": [], "off": []}, {"on": [], "off": []}
    for i in range(args.repeat):  # interleaved, so a busy neighbour hurts both alike
        for mode in ("off", "on"):
            env = {"WTWIND_STATE__PATH": str(tmp / f"tp-{i}.db")}
            if mode == "off":
                env["WTWIND_STATE__ENABLED"] = "false"
            wall, cpu = throughput(f"ipc://{tmp}/{mode}{i}.sock", args.ingest, env)
            walls[mode].append(wall)
            cpus[mode].append(cpu)
    for name, d in (("wall-clock ev/s", walls), ("ev per daemon CPU-s", cpus)):
        on, off = med(d["on"]), med(d["off"])
        print(f"ingest {PRODUCERS}x{args.ingest} events, median of {args.repeat}, {name}: "
              f"store on {on:,.0f}, off {off:,.0f}, on/off {on / off:.2f}")


if __name__ == "__main__":
    main()
