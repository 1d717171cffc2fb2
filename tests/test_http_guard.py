"""Issue 15, attacks 8 and 9, over real HTTP against a real daemon.

Host is checked (DNS rebinding), a state-changing POST from another site's page is
refused, a configured token is required, and `/api/analyze` is bounded in rows and in
the time its body may take; refusals are counted and `/healthz` keeps answering.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

from helpers import Daemon, http_get, wait_for


def request(url, method="GET", body=None, **headers) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def refused(d, reason):
    return d.metrics().get(("wtwind_http_refused_total", (("reason", reason),)), 0)


class TestHostAndOrigin:
    def test_foreign_host_and_cross_site_post_are_refused(self, daemon):
        assert request(daemon.url + "/api/runs", Host="evil.example")[0] == 421
        assert request(daemon.url + "/api/runs", Host=f"evil.example:{daemon.http_port}")[0] == 421
        assert request(daemon.url + "/api/runs", Host=f"localhost:{daemon.http_port}")[0] == 200
        assert request(daemon.url + "/api/runs")[0] == 200
        redeliver = daemon.url + "/api/alerts/redeliver"
        assert request(redeliver, "POST", b"", Origin="https://evil.example")[0] == 403
        assert request(redeliver, "POST", b"", **{"Sec-Fetch-Site": "cross-site"})[0] == 403
        assert request(redeliver, "POST", b"", Origin=daemon.url)[0] == 200
        assert request(redeliver, "POST", b"")[0] == 200  # the CLI sends no Origin
        assert refused(daemon, "host") == 2 and refused(daemon, "origin") == 2


class TestDeprecatedRoute:
    def test_the_old_replay_route_redelivers_and_says_it_is_deprecated(self, daemon):
        """POST /api/alerts/replay answers as /redeliver, with a Deprecation header and its old key, logged."""
        req = urllib.request.Request(daemon.url + "/api/alerts/replay", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200 and r.headers["Deprecation"] == "true"
            assert json.loads(r.read()) == {"redelivered": 0, "replayed": 0}
        wait_for(lambda: "deprecated_route" in daemon.log(), what="the deprecation logged")
        status, body = request(daemon.url + "/api/alerts/redeliver", "POST", b"")
        assert status == 200 and json.loads(body) == {"redelivered": 0}


class TestToken:
    def test_state_changing_endpoints_need_the_token(self, tmp_path):
        token = tmp_path / "token"
        token.write_text("a-long-enough-token-1234\n")
        with Daemon({"WTWIND_HTTP__TOKEN_FILE": str(token)}, tmpdir=str(tmp_path)) as d:
            redeliver = d.url + "/api/alerts/redeliver"
            assert request(redeliver, "POST", b"")[0] == 401
            assert request(redeliver, "POST", b"", Authorization="Bearer wrong")[0] == 401
            assert request(redeliver, "POST", b"", Authorization="Bearer a-long-enough-token-1234")[0] == 200
            assert request(d.url + "/api/alerts/dead")[0] == 200  # reads need none
            cli = [sys.executable, "-m", "wtwin.daemon.cli", "alerts", "redeliver", "--all", "--url", d.url]
            assert subprocess.run(cli, capture_output=True, timeout=60).returncode == 1
            ok = subprocess.run(cli + ["--token-file", str(token)], capture_output=True, text=True, timeout=60)
            assert ok.returncode == 0, ok.stderr
            assert refused(d, "token") == 3


class TestAnalyzeBounds:
    def test_too_many_rows_is_a_clear_400(self, daemon):
        body = b"step,loss\n" + b"".join(b"%d,1\n" % i for i in range(200_001))
        status, text = request(daemon.url + "/api/analyze?name=big.csv", "POST", body,
                               **{"Content-Type": "text/csv"})
        assert status == 400 and "200,000 rows" in text

    def test_a_slow_body_is_cut_and_health_stays_up(self, tmp_path):
        with Daemon({"WTWIND_HTTP__BODY_TIMEOUT_S": "2"}, tmpdir=str(tmp_path)) as d:
            slow = socket.create_connection(("127.0.0.1", d.http_port))
            slow.sendall(b"POST /api/analyze?name=a.csv HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                         b"Content-Type: text/csv\r\nContent-Length: 1000000\r\n\r\nstep,loss\n" % d.http_port)
            t0 = time.monotonic()
            assert http_get(d.url + "/healthz")[0] == 200
            slow.settimeout(60)
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = slow.recv(4096)
                if not chunk:
                    break
                answer += chunk
            # cut at 2 s; never cut, the request would hang (the socket's 60 s timeout)
            assert answer.startswith(b"HTTP/1.1 400") and time.monotonic() - t0 < 60
            slow.close()
            wait_for(lambda: http_get(d.url + "/healthz")[0] == 200)
