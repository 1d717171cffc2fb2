"""Helpers for the trainer-integration and deployment tests: a real wtwind, two ways.

Each daemon gets a private state database (``WTWIND_STATE__PATH``) so runs never leak
from one test, or from the user's own daemon, into another.

``InProcessDaemon`` runs the real `Server` on its own asyncio loop in a thread (the
framework tests: no second interpreter to start, the alerts the daemon published are
visible to the test). ``DaemonProcess`` runs ``python -m wtwin.daemon.cli`` as a child
(the systemd test). Both bind a private ``ipc://`` endpoint and a free HTTP port.
Everything waits by polling with a deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``pred()`` until it returns something truthy; fail after ``timeout`` s (60 at
    least: the timeout guards a hang, not the machine's speed, as helpers.HANG_S)."""
    timeout = max(timeout, 60.0)
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class InProcessDaemon:
    """The real daemon on a background thread: ``with InProcessDaemon() as d: d.endpoint``."""

    def __init__(self, **sections) -> None:
        from wtwin.daemon.config import load

        self.tmp = tempfile.mkdtemp(prefix="wtwin-it-")
        self.endpoint = f"ipc://{self.tmp}/wtwind.sock"
        env = {"WTWIND_LISTEN__ENDPOINTS": self.endpoint, "WTWIND_HTTP__PORT": "0",
               "WTWIND_STATE__PATH": f"{self.tmp}/wtwind.db"}
        for key, value in sections.items():
            env[f"WTWIND_{key.upper()}"] = str(value)
        self.config = load(None, environ=env)
        self.alerts: list = []
        self._thread = threading.Thread(target=self._main, name="wtwind-test", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    def _main(self) -> None:
        from wtwin.daemon.server import Server

        async def run() -> None:
            self.server = Server(self.config)
            self.server.alert_listeners.append(self.alerts.append)
            self.loop = asyncio.get_running_loop()
            await self.server.startup(self.loop)
            self._started.set()
            try:
                await self.server.main_loop()
            finally:
                await self.server.shutdown()

        try:
            asyncio.run(run())
        except BaseException as exc:  # surfaced by __enter__/__exit__
            self._error = exc
            self._started.set()

    def __enter__(self) -> "InProcessDaemon":
        self._thread.start()
        if not self._started.wait(30) or self._error is not None:
            raise AssertionError(f"daemon did not start: {self._error!r}")
        self.http = f"http://127.0.0.1:{self.server.http_port}"
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.server.request_stop)
        self._thread.join(15)
        assert not self._thread.is_alive(), "daemon thread did not stop"

    def firing(self, run: str, severities=("warning", "critical")) -> list:
        return [a for a in list(self.alerts)
                if a.run == run and a.status == "firing" and a.severity in severities]


class DaemonProcess:
    """``python -m wtwin.daemon.cli`` as a child process with a private endpoint and port."""

    def __init__(self, *, env: dict | None = None, config_text: str | None = None) -> None:
        self.tmp = tempfile.mkdtemp(prefix="wtwin-it-")
        self.endpoint = f"ipc://{self.tmp}/wtwind.sock"
        self.port = free_port()
        self.http = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, WTWIND_LISTEN__ENDPOINTS=self.endpoint,
                        WTWIND_HTTP__PORT=str(self.port), WTWIND_LOG__FORMAT="json",
                        WTWIND_STATE__PATH=f"{self.tmp}/wtwind.db")
        self.env.update(env or {})
        self.args = [sys.executable, "-m", "wtwin.daemon.cli"]
        if config_text is not None:
            path = Path(self.tmp) / "wtwind.toml"
            path.write_text(config_text)
            self.args += ["--config", str(path)]
        self.proc: subprocess.Popen | None = None

    def start(self) -> "DaemonProcess":
        self.log = open(Path(self.tmp) / "stderr.log", "w+")
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        return self

    def stderr(self) -> str:
        return (Path(self.tmp) / "stderr.log").read_text()

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"wtwind exited {self.proc.returncode}:\n{self.stderr()}")
            try:
                return http_get(self.http + "/readyz", timeout=0.5)[0] == 200
            except OSError:
                return False
        wait_for(ready, timeout, 0.05, "wtwind /readyz")

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError("wtwind did not stop on SIGTERM")
        finally:
            self.log.close()


@pytest.fixture(autouse=False, scope="module")
def one_torch_thread():
    """Tiny models train fastest on one thread (and do not fight the other tests for cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def kick(parameters, sigma: float, seed: int = 5) -> None:
    """What a bad batch does to the weights: seeded noise of scale ``sigma`` added to each
    parameter (torch tensors), in place."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in parameters:
            p.add_(torch.randn(p.shape, generator=g) * sigma)


class KickAt:
    """Counts the batches it is called on; at the ``batch``-th (by data position, so a
    rewind does not train on it again) it kicks the weights (``kick``)."""

    def __init__(self, batch: int, sigma: float) -> None:
        self.batch, self.sigma, self.seen = batch, sigma, 0

    def __call__(self, parameters) -> None:
        self.seen += 1
        if self.seen == self.batch:
            kick(parameters, self.sigma)


def run_result(d, name: str):
    """Run ``name``'s alerts as (kind, severity, status, step), its rewind audit and its
    last state, once its ``run_end`` has reached the daemon ``d`` (an `InProcessDaemon`)."""
    run = d.server.table.get(name)
    wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
    alerts = [(a.kind, a.severity, a.status, a.step) for a in d.alerts if a.run == name]
    return alerts, list(run.rewinds), run.last_state
