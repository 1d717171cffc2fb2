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


class TestConfig:
    @pytest.mark.parametrize("field,value", [("header_timeout_s", 0), ("keepalive_timeout_s", -1),
                                             ("max_connections", 0)])
    def test_bad_values_are_refused_in_words(self, field, value):
        with pytest.raises(ConfigError, match=field):
            HttpConfig(**{field: value})
