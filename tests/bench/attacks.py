"""Issue 24's floods against a real wtwind, each bounded in count and time, with figures.

    nice .venv/bin/python tests/bench/attacks.py [inbound emitters alerts logs all] [--seconds 8]

One `wtwind` subprocess per attack (default config, a private store, one webhook sink
pointing at a real HTTP receiver in this process). While the attack runs, a legitimate
trainer (the real emitter, its own run and secret) sends a loss every 10 ms; after it,
a NaN. Reported per attack: the daemon's peak VmRSS (sampled every 0.1 s), the slowest
``/healthz``, whether the legitimate trainer got every ack (``flush``), the seconds from
its NaN to the webhook and to its trainer's ``on_alert``, and the attack's own counters.

- ``inbound``: one connection re-sends one 510 KB batch of 10,000 loss events (no
  ``emitter`` field) as fast as it can;
- ``emitters``: a fresh emitter id per event on one run, with ``seq`` 0 (a duplicate)
  and with a gap (out of order);
- ``alerts``: 10 connections x 1,000 anonymous runs x one NaN each;
- ``logs``: ``run_start`` events with a 4 KiB ``kind`` and ``rewind`` events; the
  daemon's log growth in bytes per second;
- ``secrets`` (issue 38): 10 connections x 100 runs, a fresh secret and a NaN each;
- ``paced`` (issue 38): 40 connections, each a new run with a fresh secret and a NaN
  every 50 ms;
- ``http`` (issue 38): 300 sockets from one client trickling their headers, each one
  the daemon closes opened again.

``all`` runs every attack at once.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import zmq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from helpers import Daemon, http_get, rss_mb, wait_for  # noqa: E402
from wtwin.emitters import connect, wire  # noqa: E402
from http_recorder import ThreadedRecorder  # noqa: E402


class Sampler(threading.Thread):
    """Peak RSS and the slowest /healthz while the attack runs."""

    def __init__(self, d: Daemon) -> None:
        super().__init__(daemon=True)
        self.d, self.stop, self.peak, self.healthz = d, threading.Event(), 0.0, 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_mb(self.d.proc.pid))
            t0 = time.monotonic()
            try:
                http_get(self.d.url + "/healthz", 30)
            except OSError:
                pass
            self.healthz = max(self.healthz, time.monotonic() - t0)
            self.peak = max(self.peak, rss_mb(self.d.proc.pid))
            self.stop.wait(0.1)


class Legit(threading.Thread):
    """A real trainer: a loss every 10 ms until told, then a NaN; times its page."""

    def __init__(self, d: Daemon, secret_dir: Path, every_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.every_s = every_s
        self.alerted: float | None = None
        self.em = connect(d.tcp, run="legit", heartbeat_s=3600, secret_dir=secret_dir,
                          on_alert=self._on_alert)
        self.stop, self.sent, self.nan_at = threading.Event(), 0, None

    def _on_alert(self, msg: dict) -> None:
        if msg.get("kind") == "nonfinite" and self.alerted is None:
            self.alerted = time.time()

    def run(self) -> None:
        step = 0
        while not self.stop.is_set():
            step += 1
            self.em.loss(step, 3.0 / (1 + step) ** 0.1)
            self.sent += 1
            self.em.poll()
            time.sleep(self.every_s)
        self.nan_at = time.time()
        self.em.loss(step + 1, float("nan"))
        deadline = time.monotonic() + 60
        while self.alerted is None and time.monotonic() < deadline:
            self.em.poll()
            time.sleep(0.005)


def page_at(hook: ThreadedRecorder, run: str, raised: bool = False) -> float | None:
    """When the run's nonfinite page reached the webhook (``raised``: when the daemon
    raised it, from the alert's startsAt)."""
    for req in hook.requests("/hook"):
        for a in req.json().get("alerts", []):
            if a["labels"].get("run") == run and a["labels"].get("kind") == "nonfinite":
                return datetime.fromisoformat(a["startsAt"].replace("Z", "+00:00")).timestamp() if raised else req.at
    return None


def dealer(endpoint: str, hwm: int = 1000) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.connect(endpoint)
    return sock


def send_for(sock: zmq.Socket, frames, stop: threading.Event, counter: list) -> None:
    """Send ``frames`` round and round without blocking until ``stop``; counts what left."""
    while not stop.is_set():
        for f in frames:
            try:
                sock.send(f, zmq.NOBLOCK)
                counter[0] += 1
            except zmq.Again:
                stop.wait(0.0005)


# ---- the attacks: each runs until ``stop`` and returns its own figures -----------------------
def inbound(d: Daemon, stop: threading.Event) -> dict:
    events = [{"v": 1, "type": "loss", "run": "flood", "seq": i + 1, "step": i, "loss": 2.0}
              for i in range(10_000)]
    frame = wire.encode_batch(events)
    sock, sent = dealer(d.tcp), [0]
    send_for(sock, [frame], stop, sent)
    sock.close()
    return {"frame_kb": round(len(frame) / 1024), "frames_sent": sent[0]}


def emitters(d: Daemon, stop: threading.Event) -> dict:
    sock, sent, i = dealer(d.tcp), [0], 0
    sock.send(wire.encode({"v": 1, "type": "run_start", "run": "ids", "seq": 1, "emitter": "first"}))
    while not stop.is_set():
        batch = [{"v": 1, "type": "heartbeat", "run": "ids", "seq": 0 if k % 2 else 5,
                  "emitter": f"{i + k:064d}"} for k in range(500)]
        i += 500
        send_for_once(sock, wire.encode_batch(batch, base=2), stop, sent)
    sock.close()
    return {"ids_sent": i}


def send_for_once(sock, frame, stop, counter) -> None:
    while not stop.is_set():
        try:
            sock.send(frame, zmq.NOBLOCK)
            counter[0] += 1
            return
        except zmq.Again:
            stop.wait(0.0005)


def alerts(d: Daemon, stop: threading.Event) -> dict:
    socks = [dealer(d.tcp) for _ in range(10)]
    for c, sock in enumerate(socks):
        for i in range(1000):
            sock.send(wire.encode({"v": 1, "type": "loss", "run": f"nan-{c}-{i}", "seq": 1, "step": 1,
                                   "loss": float("nan")}))
    stop.wait()
    for sock in socks:
        sock.close(linger=2000)
    return {"nan_runs": 10_000}


def logs(d: Daemon, stop: threading.Event) -> dict:
    size0 = d.log_path.stat().st_size
    t0, sock, sent, i = time.monotonic(), dealer(d.tcp), [0], 0
    kind = "k" * 4096
    while not stop.is_set():
        send_for_once(sock, wire.encode({"v": 1, "type": "run_start", "run": f"log-{i % 900}", "seq": 1,
                                         "kind": kind}), stop, sent)
        send_for_once(sock, wire.encode({"v": 1, "type": "rewind", "run": f"log-{i % 900}", "seq": 2,
                                         "step": 1, "from_step": 2, "kind": kind[:64],
                                         "checkpoint": "/c/" + "p" * 250}), stop, sent)
        i += 1
    sock.close()
    grown = d.log_path.stat().st_size - size0
    return {"frames_sent": sent[0], "log_mb_per_s": round(grown / 2**20 / (time.monotonic() - t0), 3)}


def secrets_flood(d: Daemon, stop: threading.Event) -> dict:
    """Issue 38: 10 connections x 100 runs, each run its own secret and one NaN."""
    socks = [dealer(d.tcp) for _ in range(10)]
    for c, sock in enumerate(socks):
        for i in range(100):
            sock.send(wire.encode({"v": 1, "type": "loss", "run": f"minted-{c}-{i}", "seq": 1, "step": 1,
                                   "loss": float("nan"), "auth": secrets.token_urlsafe(32)}))
    stop.wait()
    for sock in socks:
        sock.close(linger=2000)
    return {"nan_runs": 1000}


def paced(d: Daemon, stop: threading.Event) -> dict:
    """Issue 38: 40 connections, each a new run with its own secret and one NaN every 50 ms."""
    socks, i = [dealer(d.tcp) for _ in range(40)], 0
    while not stop.wait(0.05):
        for c, sock in enumerate(socks):
            try:
                sock.send(wire.encode({"v": 1, "type": "loss", "run": f"paced-{c}-{i}", "seq": 1, "step": 1,
                                       "loss": float("nan"), "auth": secrets.token_urlsafe(32)}), zmq.NOBLOCK)
            except zmq.Again:
                pass
        i += 1
    for sock in socks:
        sock.close()
    return {"nan_runs": 40 * i}


def http_hold(d: Daemon, stop: threading.Event) -> dict:
    """Issue 38: one client holds 300 sockets trickling their headers, reopening each one
    the daemon closes (the sampler's /healthz comes from the same address)."""
    import socket

    def opened():
        s = socket.create_connection(("127.0.0.1", d.http_port), timeout=5)
        s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        s.setblocking(False)
        return s

    held, reopened = [opened() for _ in range(300)], 0
    while not stop.wait(0.5):
        for k, s in enumerate(held):
            try:
                gone = s.recv(1) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                s.close()
                held[k], reopened = opened(), reopened + 1
    for s in held:
        s.close()
    return {"sockets": 300, "reopened": reopened}


ATTACKS = {"inbound": inbound, "emitters": emitters, "alerts": alerts, "logs": logs,
           "secrets": secrets_flood, "paced": paced, "http": http_hold}


def sink_config(tmp: Path, url: str) -> Path:
    cfg = tmp / "wtwind.toml"
    cfg.write_text(f'[[sinks]]\ntype = "webhook"\nname = "hook"\nurl = "{url}"\n'
                   '[delivery.retry]\nbase_s = 0.05\ncap_s = 0.5\n')
    return cfg


def run_attack(names: list[str], seconds: float, env: dict | None = None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="wtwind-attacks-"))
    hook = ThreadedRecorder()
    out: dict = {"attacks": names}
    env = dict(env or {})
    every = float(env.pop("LEGIT_EVERY_S", 0.01))
    with Daemon(args=("--config", str(sink_config(tmp, hook.rec.url))), tmpdir=str(tmp), extra_env=env) as d:
        out["idle_rss_mb"] = round(rss_mb(d.proc.pid), 1)
        legit = Legit(d, tmp, every)
        legit.start()
        sampler = Sampler(d)
        sampler.start()
        stop, results, threads = threading.Event(), {}, []
        for name in names:
            t = threading.Thread(target=lambda n=name: results.__setitem__(n, ATTACKS[n](d, stop)), daemon=True)
            t.start()
            threads.append(t)
        time.sleep(seconds)
        stop.set()
        legit.stop.set()
        for t in threads:
            t.join(60)
        legit.join(90)
        try:
            webhook = wait_for(lambda: page_at(hook, "legit"), 60, 0.05, "the legit page at the webhook")
        except AssertionError:
            webhook = None  # not within 60 s of the attack's end
        out["legit_acked_all"] = legit.em.flush(30)
        sampler.stop.set()
        sampler.join(60)
        m = d.metrics()
        out.update({
            "peak_rss_mb": round(sampler.peak, 1), "max_healthz_s": round(sampler.healthz, 2),
            "legit_sent": legit.sent, "legit_acked": legit.em.stats["acked"],
            "legit_emitter": {k: v for k, v in legit.em.stats.items() if v},
            "legit_nan_at": legit.nan_at,
            "legit_page_webhook_s": None if webhook is None else round(webhook - legit.nan_at, 3),
            "legit_page_raised_s": None if webhook is None else round(page_at(hook, "legit", True) - legit.nan_at, 3),
            "legit_page_trainer_s": None if legit.alerted is None else round(legit.alerted - legit.nan_at, 3),
            "results": results,
            "dropped": {dict(lab)["reason"]: v for (n, lab), v in m.items() if n == "wtwind_events_dropped_total"},
            "inbound_dropped": {dict(lab).get("reason", ""): v for (n, lab), v in m.items()
                                if n == "wtwind_frames_dropped_total"},
            "log_mb": round(d.log_path.stat().st_size / 2**20, 2),
            "received": {dict(lab)["type"]: v for (n, lab), v in m.items() if n == "wtwind_events_received_total"},
        })
        legit.em.close()
    hook.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("attacks", nargs="*", default=["all"])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for wtwind (WTWIND_...)")
    args = ap.parse_args()
    names = list(ATTACKS) if args.attacks == ["all"] else args.attacks
    env = dict(kv.split("=", 1) for kv in args.env)
    print(json.dumps(run_attack(names, args.seconds, env), indent=1))


if __name__ == "__main__":
    main()
