"""The daemon's memory under the floods of issue 15, with the default quotas, against 2 GB.

    .venv/bin/python tests/bench/floods.py [--clients 12] [--emitters 50000] [--text]

A real `wtwind` subprocess (default config, private store). Measured: VmRSS of the
daemon (from /proc) and the size of its database and WAL:

1. idle, after start;
2. the run-table flood: ``clients`` connections each create as many runs as they are
   allowed (``max_runs_per_client``), each run with a ``run_start`` carrying the largest
   config the default quota admits (``max_config_bytes``, many small keys: the densest
   shape) and one loss event (the detectors are built on it), until ``max_runs`` is full
   and further runs are refused;
3. the emitter-id flood: ``emitters`` distinct 64-char emitter ids sent to one run, and
   the per-run maximum of ids on every run of the table;
4. after ``GET /api/runs`` and ``GET /metrics`` on that full table (``after_pages``).

``--text`` adds issue 24's free text to every run of the table: a 4 KiB ``kind`` on its
``run_start``, 32 ``rewind`` events (the longest kind and checkpoint the wire admits)
and one ``eval`` with 64 metrics of 64-char names.

The per-peer limits of ``[listen]`` (issue 24) are lifted here: what is measured is
the memory of a full table, not how fast a flooder may fill it (tests/bench/attacks.py).

Then a legitimate trainer on a fresh connection is refused with ``run_table_full``
(the table is full), which the script checks, and a legitimate trainer's run that
existed before the flood is still acked.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import zmq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from helpers import Daemon, http_get, rss_mb, wait_for  # noqa: E402
from wtwin.daemon.config import RunsConfig  # noqa: E402
from wtwin.emitters import connect, wire  # noqa: E402


def db_mb(tmp: Path) -> float:
    return sum(p.stat().st_size for p in tmp.glob("wtwind.db*") if p.is_file()) / 2**20


def densest_config(limit: int) -> dict:
    """As many small int-valued keys as fit in ``limit`` bytes of msgpack."""
    config, n = {}, 0
    while True:
        config[f"k{n:05d}"] = n % 100
        if len(wire.encode(config)) > limit - 16:
            del config[f"k{n:05d}"]
            return config
        n += 1


def text_events(run: str) -> list[dict]:
    """32 rewinds and one eval of 64 metrics, after the run's first two events."""
    rewinds = [{"v": 1, "type": "rewind", "run": run, "seq": 3 + i, "step": 1, "from_step": 1,
                "kind": "r" * 64, "checkpoint": "/ckpt/" + "c" * 250, "emitter": "e"} for i in range(32)]
    metrics = {f"{i:02d}".ljust(64, "m"): 1.0 for i in range(64)}
    return rewinds + [{"v": 1, "type": "eval", "run": run, "seq": 35, "step": 1, "metrics": metrics,
                       "emitter": "e"}]


def dealer(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, -1)  # closed before the daemon took it all: keep sending (back-pressure)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    return sock


def known_runs(d: Daemon) -> float:
    return d.metrics().get(("wtwind_known_runs", ()), 0.0)


def settle(d: Daemon) -> None:
    wait_for(lambda: d.metrics().get(("wtwind_store_dirty_runs", ()), 1) == 0, 300, 0.5, "flushed")
    time.sleep(2.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--emitters", type=int, default=50_000)
    ap.add_argument("--text", action="store_true", help="issue 24's free text on every run")
    args = ap.parse_args()
    runs_cfg = RunsConfig()
    out = {"defaults": {"max_runs": runs_cfg.max_runs, "max_runs_per_client": runs_cfg.max_runs_per_client,
                        "max_emitters_per_run": runs_cfg.max_emitters_per_run,
                        "max_config_bytes": runs_cfg.max_config_bytes}}
    tmp = Path(tempfile.mkdtemp(prefix="wtwind-floods-"))
    lifted = {"WTWIND_LISTEN__PEER_LOOP_SHARE": "1", "WTWIND_LISTEN__LOOP_SHARE": "1",
              "WTWIND_LISTEN__PEER_BURST_S": "60"}
    with Daemon(tmpdir=str(tmp), extra_env=lifted) as d:
        pid = d.proc.pid
        legit = connect(d.tcp, run="legit", heartbeat_s=3600)
        legit.loss(1, 2.0)
        assert legit.flush(20)
        out["idle_rss_mb"] = round(rss_mb(pid), 1)

        config = densest_config(runs_cfg.max_config_bytes)
        t0 = time.monotonic()
        for c in range(args.clients):
            sock = dealer(d.tcp)
            for i in range(runs_cfg.max_runs_per_client):
                run = f"flood-{c}-{i}"
                sock.send(wire.encode({"v": 1, "type": "run_start", "run": run, "seq": 1,
                                       "config": config, "emitter": "e",
                                       **({"kind": "k" * 4096} if args.text else {})}))
                sock.send(wire.encode({"v": 1, "type": "loss", "run": run, "seq": 2, "step": 1,
                                       "loss": 2.0, "emitter": "e"}))
                if args.text:
                    sock.send(wire.encode_batch(text_events(run)))
            sock.close()
        wait_for(lambda: known_runs(d) >= runs_cfg.max_runs, 600, 0.5, "the run table full")
        settle(d)
        m = d.metrics()
        out["run_flood"] = {
            "runs_sent": args.clients * runs_cfg.max_runs_per_client, "config_keys": len(config),
            "known_runs": known_runs(d),
            "refused_run_table_full": m.get(("wtwind_events_dropped_total", (("reason", "run_table_full"),)), 0),
            "rss_mb": round(rss_mb(pid), 1), "db_mb": round(db_mb(tmp), 1),
            "seconds": round(time.monotonic() - t0, 1)}

        t0 = time.monotonic()
        sock = dealer(d.tcp)
        for i in range(args.emitters):
            sock.send(wire.encode({"v": 1, "type": "heartbeat", "run": "flood-0-0", "seq": 1,
                                   "emitter": f"{i:064d}"}))
        for c in range(args.clients):  # every run of the table to its maximum of ids
            for i in range(runs_cfg.max_runs_per_client):
                events = [{"v": 1, "type": "heartbeat", "run": f"flood-{c}-{i}", "seq": 1,
                           "emitter": f"{c}-{i}-{k}".rjust(64, "x")}
                          for k in range(runs_cfg.max_emitters_per_run)]
                sock.send(wire.encode_batch(events))
        sock.close()
        expected = args.emitters + args.clients * runs_cfg.max_runs_per_client * runs_cfg.max_emitters_per_run
        wait_for(lambda: sum(v for (n, _l), v in d.metrics().items()
                             if n == "wtwind_events_received_total") >= expected, 900, 1.0, "ids flood handled")
        settle(d)
        m = d.metrics()
        out["emitter_flood"] = {
            "ids_sent": expected,
            "refused_emitter_quota": m.get(("wtwind_events_dropped_total", (("reason", "emitter_quota"),)), 0),
            "rss_mb": round(rss_mb(pid), 1), "db_mb": round(db_mb(tmp), 1),
            "seconds": round(time.monotonic() - t0, 1)}

        # the pages an operator opens on such a daemon: the run list and a scrape
        t1 = time.monotonic()
        sizes = {path: len(http_get(d.url + path, 300)[1]) for path in ("/api/runs", "/metrics")}
        out["after_pages"] = {"rss_mb": round(rss_mb(pid), 1), "seconds": round(time.monotonic() - t1, 1),
                              "bytes": sizes}

        legit.loss(2, float("nan"))
        out["legit_still_acked"] = legit.flush(20)
        newcomer = connect(d.tcp, run="newcomer", heartbeat_s=3600)
        newcomer.loss(1, 2.0)
        wait_for(lambda: newcomer.stats.get("error_run_table_full", 0) >= 1, 30, 0.1, "newcomer told")
        out["newcomer_told"] = [e["reason"] for e in newcomer.errors]
        legit.close()
        newcomer.close()
        out["budget_mb"] = 2048
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
