"""The in-process half of the bounded-memory test: a real `Server` fed real wire frames.

    python tests/_memory_stream.py DB RUNS EVENTS

The `Server` is the daemon's own (SQLite store on DB, sockets bound, HTTP up, its main
loop ticking); the frames are what an emitter sends (msgpack batches with emitter, seq
and base) handed to ``Server.handle_frame`` as the ROUTER would, round robin over the
runs, so every run's state grows in step with the others and the peak resident memory
(VmHWM) covers every depth from 0 to EVENTS events. Then every run is expired by the
idle TTL (the tick is given a clock past the TTL rather than waiting it out), must be
in the store, and gets one more event, which brings it back from the store.

Prints one JSON object per phase (``round`` after each BATCH events a run, then
``streamed``, ``expired``, ``back``, ``stopped``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile
import time

from wtwin.daemon import config as config_mod
from wtwin.daemon.logsetup import configure
from wtwin.daemon.server import Server
from wtwin.emitters import wire

BATCH = 100  # events a frame, as an emitter batches under load


def proc_status() -> dict[str, float]:
    """Resident memory now and its peak, in MB (from /proc/self/status)."""
    out = {}
    for line in open("/proc/self/status"):
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024
    return {"rss_mb": round(out["VmRSS"], 1), "peak_rss_mb": round(out["VmHWM"], 1)}


def curve(step: int, i: int) -> float:
    return 2.0 + (5.0 + i % 7) / step ** 0.5 + 0.01 * ((step * 7919 + i) % 13 - 6) / 6


def frame(i: int, first: int, last: int) -> bytes:
    run = f"m{i}"
    evs = [{"v": 1, "type": "loss", "run": run, "seq": s, "step": s, "loss": curve(s, i), "lr": 3e-4}
           for s in range(first, last + 1)]
    return wire.encode_batch(evs, run, base=first)  # one emitter per run, named after it


def report(phase: str, server: Server, t0: float, **extra) -> None:
    print(json.dumps({"phase": phase, "known_runs": len(server.table), "seconds": round(time.monotonic() - t0, 1),
                      "loss_events": server.stats.received["loss"], "dropped": dict(server.stats.dropped),
                      "loop_errors": server.stats.loop_errors, **proc_status(), **extra}), flush=True)


async def committed(server: Server, sql: str, *args) -> int:
    """A count read through the writer: it runs after every write queued before it."""
    return await server.store.writer.call(lambda conn: conn.execute(sql, args).fetchone()[0])


async def stream(db: str, runs: int, events: int) -> None:
    sock_dir = tempfile.mkdtemp(prefix="wtwin-mem-")
    cfg = config_mod.load(environ={"WTWIND_STATE__PATH": db, "WTWIND_HTTP__PORT": "0",
                                   "WTWIND_LISTEN__ENDPOINTS": f"ipc://{sock_dir}/s.sock",
                                   "WTWIND_RUNS__MAX_SERIES_RUNS": "10",
                                   # one connection feeds every run here (a trainer farm's proxy)
                                   "WTWIND_RUNS__MAX_RUNS_PER_CLIENT": str(runs),
                                   "WTWIND_RUNS__MAX_RUNS": str(max(runs, 10_000)),
                                   # the jump of the clock past the TTL must not read as a stall
                                   "WTWIND_DETECTION__STALL_AFTER_S": str(30 * 86400)})
    configure("warning", "json")
    server = Server(cfg)
    await server.startup(asyncio.get_running_loop())
    main_loop = asyncio.create_task(server.main_loop())
    t0 = time.monotonic()
    ident = b"memory-test"
    for first in range(1, events + 1, BATCH):
        last = min(first + BATCH - 1, events)
        for i in range(runs):
            server.handle_frame(ident, frame(i, first, last))
            await asyncio.sleep(0)  # the loop's other work: ticks, writer callbacks, HTTP
        report("round", server, t0, events_per_run=last)
    report("streamed", server, t0)

    server.tick(time.time() + cfg.runs.idle_ttl_s + 1)  # every run is idle past the TTL
    stored = await committed(server, "SELECT count(*) FROM runs WHERE step = ?", events)
    report("expired", server, t0, stored_at_last_step=stored)

    for i in range(runs):
        server.handle_frame(ident, frame(i, events + 1, events + 1))
        await asyncio.sleep(0)
    deadline = time.monotonic() + 60
    while server.restores.pending and time.monotonic() < deadline:  # read back off the loop
        await asyncio.sleep(0.01)
    restored_ok = sum(1 for r in server.table if r.step == events + 1 and r.events == events + 1)
    report("back", server, t0, continued_from_store=restored_ok)

    server.request_stop()
    await main_loop
    await server.shutdown()
    with sqlite3.connect(db) as c:
        final = c.execute("SELECT count(*) FROM runs WHERE step = ?", (events + 1,)).fetchone()[0]
    report("stopped", server, t0, stored_at_next_step=final)


def main() -> None:
    db, runs, events = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(stream(db, runs, events))


if __name__ == "__main__":
    main()
