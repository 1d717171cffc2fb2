"""`make demo`: a real wtwind catches a degrading run published by a simulated trainer.

Starts ``wtwind`` as a subprocess with embedded defaults (the endpoint and the store
moved to a private temp dir so it cannot collide with a running daemon), streams a
healthy run and a run whose loss starts degrading part-way, waits for the daemon's
alert, shows the alert line and its Prometheus series.

In a terminal it then prints the caught run's page, served on the fixed port
``DEMO_PORT`` (9470; ``make demo DEMO_PORT=...`` to move it), and keeps the daemon up
until Ctrl-C. Under ``CI=true``, or when stdin or stdout is not a terminal, it serves
on a free port and stops at once. Either way it stops the daemon with SIGTERM and
checks it exited cleanly.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from wtwin.emitters import connect

STEPS = 6000
ONSET = 3500
DEMO_PORT = 9470   # README.md and `make demo DEMO_PORT=...`


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curve(t: int, rng: random.Random, degrade: bool) -> float:
    loss = 2.0 + 8.0 * (t + 50) ** -0.45 + rng.gauss(0, 0.03)
    if degrade and t > ONSET:
        loss += 0.00025 * (t - ONSET)  # a slow, sustained drift upward
    return loss


def read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def wait_http(url: str, deadline: float) -> str | None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.1)
    return None


def interactive() -> bool:
    """A person at a terminal: not CI, stdin and stdout both terminals."""
    return os.environ.get("CI") != "true" and sys.stdin.isatty() and sys.stdout.isatty()


def demo_port(stay: bool) -> int:
    """``DEMO_PORT`` from the environment, else 9470 when staying up, else a free port."""
    raw = os.environ.get("DEMO_PORT", "")
    if raw:
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise SystemExit(f"demo: DEMO_PORT={raw!r} is not a port number (1-65535)")
        return int(raw)
    return DEMO_PORT if stay else free_port()


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def main() -> int:
    stay = interactive()
    port = demo_port(stay)
    if port_taken(port):
        print(f"demo: port {port} is in use (an earlier demo still running?); stop it, or run "
              f"`make demo DEMO_PORT=<another port>`", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="wtwin-demo-")
    endpoint = f"ipc://{tmp}/wtwind.sock"
    env = dict(os.environ, WTWIND_LISTEN__ENDPOINTS=endpoint, WTWIND_HTTP__PORT=str(port),
               WTWIND_STATE__PATH=os.path.join(tmp, "wtwind.db"),  # the store, in the temp dir
               WTWIND_LOG__FORMAT="json")
    # its log to a file (a pipe left unread while the pages are served would fill and stall
    # it); its own session, so that the terminal's Ctrl-C reaches the demo, which stops it
    log_path = os.path.join(tmp, "wtwind.log")
    with open(log_path, "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "wtwin.daemon.cli"], env=env,
                                  stderr=log, start_new_session=True)
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    try:
        if wait_http(f"http://127.0.0.1:{port}/readyz", time.monotonic() + 30) is None:
            daemon.kill()
            daemon.wait()
            print("demo: wtwind did not become ready:\n" + read(log_path), file=sys.stderr)
            return 1
        print(f"wtwind is up: {endpoint}, metrics at {metrics_url}")
        caught = stream(endpoint, metrics_url)
        if stay and caught:
            serve(port)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    for line in read(log_path).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "alert" and rec.get("sink") == "log":
            print(f"ALERT  run={rec['run']} step={rec['step']} kind={rec['kind']} "
                  f"severity={rec['severity']} status={rec['status']}: {rec.get('message', '')}")
    print(f"wtwind exited with status {daemon.returncode}")
    if not caught:
        print("demo: the degrading run was NOT caught", file=sys.stderr)
        return 1
    return 0 if daemon.returncode == 0 else 1


DEGRADATION = ("drift", "divergence", "plateau")


def serve(port: int) -> None:
    """Print where the pages are and wait for Ctrl-C (the daemon keeps serving them)."""
    base = f"http://127.0.0.1:{port}"
    print(f"\nThe caught run's page:  {base}/runs/demo-degrading\n"
          f"All runs:               {base}/\n"
          f"wtwind keeps serving them until Ctrl-C.", flush=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    print("\nstopping wtwind")


def alert_series(metrics_url: str) -> list[str]:
    body = wait_http(metrics_url, time.monotonic() + 5) or ""
    return [l for l in body.splitlines()
            if l.startswith(("wtwind_run_alert_active{", "wtwind_run_alert_severity{"))]


def stream(endpoint: str, metrics_url: str) -> bool:
    """Publish both runs; True when the trainer of the degrading run got its alert back."""
    rng = random.Random(42)
    got: dict[str, list[dict]] = {"demo-healthy": [], "demo-degrading": []}
    emitters = {run: connect(endpoint, run=run, config={"model": "toy", "lr": 3e-4},
                             on_alert=got[run].append) for run in got}
    print(f"streaming {STEPS} steps of two runs; demo-degrading starts drifting at step {ONSET}")
    seen: list[str] = []
    for t in range(1, STEPS + 1):
        for run, emit in emitters.items():
            emit.loss(t, curve(t, rng, run == "demo-degrading"))
        if t % 200 == 0:
            time.sleep(0.01)
            if t > ONSET and not seen:
                seen = [l for l in alert_series(metrics_url) if "demo-degrading" in l]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _firing(got["demo-degrading"]):
        emitters["demo-degrading"].poll()
        seen = seen or [l for l in alert_series(metrics_url) if "demo-degrading" in l]
        time.sleep(0.1)
    body = wait_http(metrics_url, time.monotonic() + 5) or ""
    seen += [l for l in body.splitlines()  # the counters that counted (all are exported from 0)
             if l.startswith("wtwind_alerts_total{") and not l.endswith(" 0.0")]
    for emit in emitters.values():
        emit.poll()
        emit.close()
    for line in seen:
        print(f"prometheus: {line}")
    for a in _firing(got["demo-degrading"]):
        print(f"trainer of demo-degrading got the alert back: kind={a['kind']} step={a['step']} "
              f"W={a.get('W')}")
    return bool(_firing(got["demo-degrading"])) and not _firing(got["demo-healthy"])


def _firing(alerts: list[dict]) -> list[dict]:
    return [a for a in alerts if a.get("status") == "firing" and a.get("kind") in DEGRADATION
            and a.get("severity") in ("warning", "critical")]


if __name__ == "__main__":
    sys.exit(main())
