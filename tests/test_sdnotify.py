"""systemd notify protocol: unit checks, then a real wtwind talking to a socket we listen on."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _integrations import DaemonProcess, wait_for  # noqa: E402
from wtwin.daemon.sdnotify import Notifier  # noqa: E402


def _listener() -> tuple[socket.socket, str]:
    path = os.path.join(tempfile.mkdtemp(prefix="wtwin-notify-"), "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    return sock, path


def _drain(sock: socket.socket, into: list[dict]) -> list[dict]:
    while True:
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return into
        into.append(dict(line.split("=", 1) for line in data.decode().splitlines()))


class TestNotifier:
    def test_without_notify_socket_every_call_is_a_noop(self):
        """No NOTIFY_SOCKET: nothing is sent and nothing fails."""
        n = Notifier.from_env({})
        assert not n.enabled
        assert n.ready() is False and n.tick(1e9) is False and n.stopping() is False
        assert n.errors == 0

    def test_watchdog_pings_at_half_the_period(self):
        """WATCHDOG_USEC=2s: at most one ping per second of the caller's clock."""
        sock, path = _listener()
        n = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
        sent = [n.tick(t) for t in (100.0, 100.5, 101.0, 101.2, 102.1)]
        assert sent == [True, False, True, False, True]
        assert [m for m in _drain(sock, [])] == [{"WATCHDOG": "1"}] * 3

    def test_watchdog_for_another_pid_is_ignored(self):
        """WATCHDOG_PID naming another process disables the pings, as sd_watchdog_enabled does."""
        n = Notifier.from_env({"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "1000000",
                               "WATCHDOG_PID": "1"})
        assert n.watchdog_interval_s is None

    def test_abstract_socket_and_unreachable_socket(self):
        """'@name' reaches an abstract socket; a missing socket is counted, not raised."""
        name = f"wtwin-test-{os.getpid()}-{time.monotonic_ns()}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind("\0" + name)
        sock.setblocking(False)
        assert Notifier("@" + name).ready("up")
        msgs = _drain(sock, [])
        assert msgs[0]["READY"] == "1" and msgs[0]["STATUS"] == "up"
        bad = Notifier("/nonexistent/notify.sock")
        assert bad.notify("READY=1") is False and bad.errors == 1


class TestDaemonUnderNotify:
    def test_ready_after_bind_watchdog_pings_then_stopping(self):
        """A real wtwind: READY=1 once /readyz answers, WATCHDOG=1 on its ticks, STOPPING=1 on SIGTERM."""
        sock, path = _listener()
        d = DaemonProcess(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"},
                          config_text="tick_s = 0.1\n").start()
        msgs: list[dict] = []
        try:
            ready = wait_for(lambda: [m for m in _drain(sock, msgs) if m.get("READY") == "1"],
                             30, what="READY=1")
            assert int(ready[0]["MAINPID"]) == d.proc.pid
            d.wait_ready(5)  # READY is only sent once the sockets are bound
            wait_for(lambda: sum(m.get("WATCHDOG") == "1" for m in _drain(sock, msgs)) >= 3,
                     10, what="three watchdog pings")
        finally:
            rc = d.stop()
        _drain(sock, msgs)
        assert rc == 0
        kinds = [next(iter(m)) for m in msgs]
        assert kinds.index("READY") < kinds.index("WATCHDOG")
        assert msgs[-1].get("STOPPING") == "1", msgs[-3:]
        assert "READY" not in kinds[kinds.index("STOPPING"):]
