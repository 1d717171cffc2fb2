"""`make demo` (offline/daemon_demo.py): in a terminal it leaves the caught run's page up
until Ctrl-C; under CI or without a terminal it stops at once, exit 0."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time

from helpers import REPO, free_port, http_get, read_until, stop_in_terminal

DEMO = [sys.executable, "-m", "wtwin.offline.daemon_demo"]


def env(**extra: str) -> dict:
    out = {k: v for k, v in os.environ.items() if k not in ("CI", "DEMO_PORT")}
    return dict(out, **extra)


class TestDemo:
    def test_without_a_terminal_it_stops_at_once(self):
        """stdin not a terminal (CI unset): caught, no page left up, exit 0."""
        r = subprocess.run(DEMO, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           env=env(DEMO_PORT=str(free_port())), cwd=REPO, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "trainer of demo-degrading got the alert back" in r.stdout
        assert "keeps serving" not in r.stdout

    def test_in_a_terminal_it_serves_the_page_until_ctrl_c(self):
        """In a pty: prints the run page's URL on DEMO_PORT, the page and its data answer
        with the caught alert, and SIGINT stops the daemon with exit 0 and frees the port."""
        port = free_port()
        master, slave = pty.openpty()
        proc = subprocess.Popen(DEMO, stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                                env=env(DEMO_PORT=str(port)))
        os.close(slave)
        try:
            m, text = read_until(master, r"(http://127\.0\.0\.1:(\d+)/runs/demo-degrading)\s.*Ctrl-C",
                                 240)
            assert m is not None, text
            assert int(m.group(2)) == port
            status, body = http_get(m.group(1))
            assert status == 200 and "<html" in body.lower()
            status, body = http_get(f"http://127.0.0.1:{port}/api/runs/demo-degrading")
            marks = json.loads(body)["markers"]
            assert status == 200 and any(k["kind"] == "drift" and k["severity"] != "info" for k in marks)
            assert proc.poll() is None  # still serving
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 0
            _, rest = read_until(master, r"wtwind exited with status 0", 10)
            assert "wtwind exited with status 0" in rest, rest
            try:
                http_get(f"http://127.0.0.1:{port}/readyz", 1.0)
                raise AssertionError("the daemon still answers after Ctrl-C")
            except OSError:
                pass
        finally:
            stop_in_terminal(proc, master)

    def test_ci_true_stops_at_once_even_in_a_terminal(self):
        """CI=true in a pty: stops at once, exit 0."""
        master, slave = pty.openpty()
        proc = subprocess.Popen(DEMO, stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                                env=env(CI="true", DEMO_PORT=str(free_port())))
        os.close(slave)
        try:
            assert proc.wait(240) == 0
            _, text = read_until(master, r"wtwind exited with status 0", 10)
            assert "keeps serving" not in text and "wtwind exited with status 0" in text, text
        finally:
            stop_in_terminal(proc, master)

    def test_bad_demo_port_is_refused(self):
        """DEMO_PORT that is not a port: a clear message, exit non-zero, no daemon."""
        r = subprocess.run(DEMO, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           env=env(DEMO_PORT="http"), cwd=REPO, timeout=60)
        assert r.returncode != 0 and "DEMO_PORT='http' is not a port number" in r.stderr
