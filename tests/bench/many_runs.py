"""Many busy runs: what the store's periodic snapshots cost the event loop.

Every dirty run is snapshotted on the loop (msgpack of its detectors' state, ~50-120 us)
each ``[state] flush_interval_s``. With thousands of busy runs that is most of the loop,
so periodic flushes are paced to ``flush_share`` of its time. This bench feeds the real
`Server` in process (no sockets, as fast as it takes them) with single-event loss frames
round-robin over ``--runs`` runs, after a warm-up that gives every run detector state,
and reports events/s, CPU per event and the loop share spent on snapshots, for:

- ``share=1.0``: pacing off in effect (the next flush may start as soon as one ends),
- ``share=0.1``: the default,
- ``interval=60``: no periodic snapshots in the window (only the forced ones), a reference.

Each condition runs in a fresh process; repeats are interleaved.

    .venv/bin/python tests/bench/many_runs.py [--runs 2000] [--seconds 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

CONDITIONS = {"share=1.0": {"WTWIND_STATE__FLUSH_SHARE": "1.0"},
              "share=0.1": {},
              "interval=60": {"WTWIND_STATE__FLUSH_INTERVAL_S": "60"}}
WARM = 300  # events per run before the window


def child(runs: int, seconds: float) -> dict:
    from wtwin.daemon import config as config_mod
    from wtwin.daemon.server import Server
    from wtwin.emitters import wire

    tmp = tempfile.mkdtemp(prefix="wtwin-bench-many-")
    env = {k: v for k, v in os.environ.items() if k.startswith("WTWIND_")}
    env.update({"WTWIND_LISTEN__ENDPOINTS": f"ipc://{tmp}/m.sock", "WTWIND_HTTP__PORT": "0",
                "WTWIND_STATE__PATH": f"{tmp}/s.db", "WTWIND_LOG__LEVEL": "warning"})
    cfg = config_mod.load(environ=env)

    def frame(r: int, i: int) -> bytes:
        return wire.encode({"v": 1, "type": "loss", "run": f"run-{r}", "seq": i, "step": i,
                            "loss": 2.0 + 3.0 / i ** 0.5 + 0.01 * ((i * 7919 + r) % 13 - 6) / 6,
                            "emitter": f"run-{r}"})

    async def main() -> dict:
        s = Server(cfg)
        await s.startup(asyncio.get_running_loop())
        handle, n = s.handle_frame, 0
        for i in range(1, WARM + 1):
            for r in range(runs):
                handle(b"bench", frame(r, i))
            await asyncio.sleep(0)
        t0, c0, l0 = time.perf_counter(), time.process_time(), s.snapshots.flush_loop_s
        i = WARM + 1
        while time.perf_counter() - t0 < seconds:
            for r in range(runs):
                handle(b"bench", frame(r, i))
                n += 1
                if not n % 200:
                    await asyncio.sleep(0)  # let the writer's completions and the timer in
            i += 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out = {"ev_s": n / wall, "cpu_us": cpu / n * 1e6, "snap_share": (s.snapshots.flush_loop_s - l0) / wall}
        await s.shutdown()
        return out

    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.runs, a.seconds)))
        return
    print(f"many runs: {a.runs} busy runs, {a.seconds:.0f} s windows after {WARM} events each, "
          f"cpus={os.cpu_count()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    for rep in range(a.repeats):
        for cond, env in CONDITIONS.items():
            proc = subprocess.run([sys.executable, __file__, "--child", "--runs", str(a.runs),
                                   "--seconds", str(a.seconds)], env={**os.environ, **env},
                                  capture_output=True, text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results[cond].append(r)
            print(f"  repeat {rep} {cond:<12}{r['ev_s']:>10,.0f} ev/s {r['cpu_us']:>8.1f} us CPU/event "
                  f"  snapshots {r['snap_share']:6.1%} of the window  (load {os.getloadavg()[0]:.1f})")
    print("medians:")
    for cond, rs in results.items():
        ev = sorted(r["ev_s"] for r in rs)[len(rs) // 2]
        share = sorted(r["snap_share"] for r in rs)[len(rs) // 2]
        print(f"  {cond:<12}{ev:>10,.0f} ev/s   snapshots {share:6.1%} of the loop")


if __name__ == "__main__":
    main()
