"""Shared test helpers: free ports, a real wtwind subprocess, polling with a deadline."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _polled(pred: Callable[[], object], deadline: float, timeout: float, what: str):
    val = pred()
    if not val and time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return val


# A wait's timeout guards a hang, never the machine's speed: a condition that holds in
# 0.1 s on a quiet machine may take seconds on a loaded one (8 test runs on 2 cores), so
# no wait gives up before HANG_S; a condition that never comes fails after it.
HANG_S = 60.0


def wait_for(pred: Callable[[], object], timeout: float = 10.0, interval: float = 0.02,
             what: str = "condition"):
    timeout = max(timeout, HANG_S)
    deadline = time.monotonic() + timeout
    while not (val := _polled(pred, deadline, timeout, what)):
        time.sleep(interval)
    return val


async def until(pred: Callable[[], object], timeout: float = 15.0, interval: float = 0.005,
                what: str = "condition"):
    """``wait_for`` inside a running event loop: the loop keeps turning while it polls."""
    import asyncio

    timeout = max(timeout, HANG_S)
    deadline = time.monotonic() + timeout
    while not (val := _polled(pred, deadline, timeout, what)):
        await asyncio.sleep(interval)
    return val


def http_get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def run_page(d, name: str) -> dict | None:
    """``/api/runs/<name>`` of daemon ``d`` (None: not found)."""
    status, body = http_get(f"{d.url}/api/runs/{name}", timeout=5)
    return json.loads(body) if status == 200 else None


def run_at(d, name: str, step: int, status: str) -> dict:
    """Wait until run ``name``'s page is at ``step`` with ``status``; that page."""
    return wait_for(lambda: (p := run_page(d, name)) and p["step"] == step and p["status"] == status and p,
                    30, 0.05, f"{name} at step {step}, {status}")


def drag_across(page, selector: str, frm: float, to: float, steps: int = 8) -> None:
    """Drag the mouse across ``selector``'s box at mid-height, from ``frm`` to ``to`` of its
    width (a uPlot zoom), in a Playwright ``page``."""
    box = page.locator(selector).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * frm, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * to, y, steps=steps)
    page.mouse.up()


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted label items): value} from Prometheus text format."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(d, name: str, **labels) -> float | None:
    """One sample of a daemon's ``/metrics`` (``d``: a `Daemon`), or None when absent."""
    return d.metrics().get((name, tuple(sorted(labels.items()))))


def raw_dealer(endpoint: str):
    """A bare DEALER socket connected to ``endpoint``: frames as any client could send them."""
    import zmq

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(endpoint)
    return sock


def need_binary(name: str) -> str:
    """Path of a Debian binary; skip when absent, except under CI where it fails."""
    import pytest

    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required under CI=true but is not installed")
        pytest.skip(f"{name} not installed")
    return path


def need_shared_data() -> Path:
    import pytest

    if not SHARED_DATA.is_dir():
        if IN_CI:
            pytest.fail(f"{SHARED_DATA} is required under CI=true")
        pytest.skip("../shared/data not present")
    return SHARED_DATA


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """A process's resident memory (``VmRSS``) or its peak (``VmHWM``), in MB, from /proc."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {key} for pid {pid}")


class Daemon:
    """A real `wtwind` subprocess on a private ipc path, a free tcp port and HTTP port."""

    def __init__(self, extra_env: dict | None = None, args: tuple = (), tmpdir: str | None = None,
                 python: str = sys.executable):
        self.python = python    # another venv's interpreter: wtwind as installed there
        self.tmp = Path(tmpdir or tempfile.mkdtemp(prefix="wtwind-test-"))
        self.ipc = f"ipc://{self.tmp}/wtwind.sock"
        self.tcp = f"tcp://127.0.0.1:{free_port()}"
        self.http_port = free_port()
        self.env = dict(os.environ, WTWIND_LISTEN__ENDPOINTS=f"{self.ipc},{self.tcp}",
                        WTWIND_HTTP__PORT=str(self.http_port), WTWIND_LOG__FORMAT="json",
                        WTWIND_STATE__PATH=str(self.tmp / "wtwind.db"),  # a private store
                        WTWIND_JOBS__CHECKPOINT_ROOTS=str(self.tmp))  # checkpoints under it only
        self.env.update(extra_env or {})
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.log_path = self.tmp / "wtwind.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 30.0) -> "Daemon":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.python, "-m", "wtwin.daemon.cli", *self.args],
                                     env=self.env, stderr=self._log, stdout=self._log)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"wtwind exited {self.proc.returncode}:\n{self.log()}")
            try:
                return http_get(self.url + "/readyz", 0.5)[0] == 200
            except OSError:
                return False

        wait_for(ready, timeout, 0.05, "wtwind /readyz")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict:
        status, body = http_get(self.url + "/metrics")
        assert status == 200, body
        return parse_metrics(body)

    def stop(self, sig=signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.kill()


def assert_builds_as_asked(pure: dict, compiled: dict) -> None:
    """Each of two processes ran the build it was asked for: the pure one (WTWIN_PURE_PYTHON)
    only ``.py`` files, the compiled one none (``files``: module -> the file it loaded)."""
    assert pure["compiled"] is False and "WTWIN_PURE_PYTHON" in pure["build"]
    assert all(f.endswith(".py") for f in pure["files"].values())
    assert compiled["compiled"] is True, compiled["build"]
    assert not any(f.endswith(".py") for f in compiled["files"].values()), compiled["files"]


def run_pure_python(code: str) -> str:
    """``code`` in a fresh interpreter with ``WTWIN_PURE_PYTHON=1``; what it printed."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, WTWIN_PURE_PYTHON="1"))
    assert res.returncode == 0, res.stderr
    return res.stdout


def admit_seq(link, run, ev: dict, identity: bytes, now: float) -> bool:
    """An event's seq admission as the daemon's ingest body takes it (daemon/ingest.py):
    the emitter's mark, its verdict, what the link makes of a refusal. True: processed."""
    em = ev.get("emitter")
    if em is None:
        return True
    run.marks.sent(em, identity, now)
    verdict = run.marks.admit_seq(em, ev["seq"], ev.get("base"))
    return not verdict or link.answer(run, em, verdict)


DAEMON_DEFAULT = object()  # ``fed_state(fast=...)``: the decoder the daemon chose


async def fed_state(tmp_path, name: str, frames: list[bytes], run: str,
                    fast=DAEMON_DEFAULT) -> dict:
    """A real `Server` (its SQLite store open, no socket traffic) fed ``frames`` through
    ``handle_frame``, then closed: run ``run``'s state, the daemon's counters and every
    alert transition. ``fast``: the ingest's reader of plain loss frames
    (``emitters/fast_decode.py``; None: every frame takes ``wire.decode_frame``)."""
    import asyncio

    import msgpack

    from wtwin.daemon.config import DaemonConfig, ListenConfig
    from wtwin.daemon.store.config import StateConfig
    from wtwin.daemon.server import Server

    cfg = DaemonConfig(listen=ListenConfig(endpoints=(f"ipc://{tmp_path}/{name}.sock",)),
                       state=StateConfig(path=str(tmp_path / f"{name}.db"), flush_interval_s=60))
    server = Server(cfg)
    if fast is not DAEMON_DEFAULT:
        server.parts.ingest.fast = fast
    server.store.open(asyncio.get_running_loop())
    alerts: list = []
    server.alert_listeners.append(alerts.append)
    for frame in frames:
        server.handle_frame(b"trainer", frame)
    r = server.table.get(run)
    stats = server.stats
    state = {"events": r.events, "hwm": dict(r.marks.hwm), "step": r.step, "loss": r.loss,
             "lr": r.lr, "spark": r.spark.points(), "series": r.series.train.rows().tolist(),
             "monitor": msgpack.packb(r.monitor.snapshot()), "frames": stats.frames,
             "received": dict(stats.received), "dropped": dict(stats.dropped),
             "rejected": dict(stats.rejected),
             "alerts": [(a.kind, a.severity, a.status, a.step) for a in alerts]}
    server.snapshots.close()
    await server.store.close()
    return state


def read_until(fd: int, pattern: str, timeout: float) -> tuple["re.Match | None", str]:
    """Read a pty until ``pattern`` shows up in what was read (or the deadline, or EOF)."""
    import re
    import select
    text, deadline = "", time.monotonic() + timeout
    while (m := re.search(pattern, text, re.S)) is None and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            text += chunk.decode(errors="replace")
    return m, text


def stop_in_terminal(proc, master: int) -> None:
    """Stop a process run in a pty as a user would: Ctrl-C first (the demo stops its
    daemon in its own session), killed after 30 s; then close the pty."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    os.close(master)
