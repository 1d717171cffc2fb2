"""Slowloris against a real daemon (issue 24): connections that trickle their headers are
closed after ``header_timeout_s``, idle keep-alive ones after ``keepalive_timeout_s``, and no
more than ``max_connections`` stay open, so /healthz and new trainers keep being served."""

from __future__ import annotations

import socket
import time

import pytest

from helpers import Daemon, http_get, wait_for
from wtwin.daemon.config import ConfigError, HttpConfig


def refused(d, reason):
    return d.metrics().get(("wtwind_http_refused_total", (("reason", reason),)), 0)


def slow_client(port: int) -> socket.socket:
    """Opens a connection and sends a request line and one header, never the blank line."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    return s


def closed_by_peer(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


class TestSlowHeaders:
    def test_trickled_headers_are_cut_and_health_answers(self, tmp_path):
        env = {"WTWIND_HTTP__HEADER_TIMEOUT_S": "1"}
        with Daemon(env, tmpdir=str(tmp_path)) as d:
            slow = [slow_client(d.http_port) for _ in range(16)]
            # every trickler is closed within the header timeout (polled, not slept)
            for s in slow:
                s.sendall(b"X-Slow: 1\r\n")  # still trickling
            wait_for(lambda: all(closed_by_peer(s) for s in slow), timeout=60,
                     what="slow-header connections closed")
            assert refused(d, "slow_headers") >= 16
            assert http_get(d.url + "/healthz")[0] == 200
            for s in slow:
                s.close()

    def test_a_full_table_refuses_the_next_connection(self, tmp_path):
        env = {"WTWIND_HTTP__HEADER_TIMEOUT_S": "600", "WTWIND_HTTP__MAX_CONNECTIONS": "8"}
        with Daemon(env, tmpdir=str(tmp_path)) as d:
            held = [slow_client(d.http_port) for _ in range(8)]
            try:
                extra = socket.create_connection(("127.0.0.1", d.http_port), timeout=30)
                wait_for(lambda: closed_by_peer(extra), timeout=60, what="the 9th connection closed")
            finally:
                for s in held:
                    s.close()
            # the held ones are gone: the daemon serves again
            wait_for(lambda: http_get(d.url + "/healthz")[0] == 200, timeout=60, what="/healthz again")
            assert refused(d, "connections") >= 1

    def test_a_slow_request_being_handled_is_not_cut(self, tmp_path):
        env = {"WTWIND_HTTP__HEADER_TIMEOUT_S": "1"}
        with Daemon(env, tmpdir=str(tmp_path)) as d:
            t0 = time.monotonic()
            status, _ = http_get(d.url + "/api/runs")
            assert status == 200
            # a keep-alive client's second request on the same connection still works
            s = socket.create_connection(("127.0.0.1", d.http_port), timeout=30)
            for _ in range(2):
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                data = b""
                while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                    data += s.recv(4096)
                assert data.startswith(b"HTTP/1.1 200")
            s.close()
            assert time.monotonic() - t0 < 600


def refused_from_elsewhere(d, reason) -> float:
    """``refused`` read from 127.0.0.2 (another client: this one is past its cap)."""
    s = socket.create_connection(("127.0.0.1", d.http_port), timeout=30, source_address=("127.0.0.2", 0))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    for line in data.decode().splitlines():
        if line.startswith(f'wtwind_http_refused_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


class TestProbesPastTheCaps:
    def test_300_trickling_sockets_from_one_client_leave_the_probes_answering(self, tmp_path):
        """Issue 38: one client holds 300 connections trickling their headers (and 40 more
        that never finish a line); past its 32 the rest are not served, yet /healthz and
        /readyz from the same address answer every time (a79b833: 10 of 13 failed)."""
        env = {"WTWIND_HTTP__HEADER_TIMEOUT_S": "600"}
        with Daemon(env, tmpdir=str(tmp_path)) as d:
            held = []
            try:
                for _ in range(300):
                    s = socket.create_connection(("127.0.0.1", d.http_port), timeout=30)
                    s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    held.append(s)
                for _ in range(40):  # past the cap, a first line that never ends: they wait, then go
                    s = socket.create_connection(("127.0.0.1", d.http_port), timeout=30)
                    s.sendall(b"GET /heal")
                    held.append(s)
                wait_for(lambda: refused_from_elsewhere(d, "per_client") >= 250, timeout=60,
                         what="connections past the client cap")
                for _ in range(13):
                    for path in ("/healthz", "/readyz"):
                        assert http_get(d.url + path, 10)[0] == 200, path
                assert sum(not closed_by_peer(s) for s in held[:300]) <= 32 + 32
            finally:
                for s in held:
                    s.close()


class TestConfig:
    @pytest.mark.parametrize("field,value", [("header_timeout_s", 0), ("keepalive_timeout_s", -1),
                                             ("max_connections", 0), ("max_connections_per_client", 0),
                                             ("probe_slots", 0)])
    def test_bad_values_are_refused_in_words(self, field, value):
        with pytest.raises(ConfigError, match=field):
            HttpConfig(**{field: value})
