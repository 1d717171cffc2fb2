"""The low items of issue 24, each against a real daemon: a bad `limit` is a 400 in words, a
huge form field is refused without being held, a run name with CR/LF is refused at the door
(it was listed, but its page was a 404), and the emitter refuses such a name at once."""

from __future__ import annotations

import json

import pytest

from helpers import http_get, raw_dealer
from test_http_guard import request
from test_ownership import error_replies
from wtwin.emitters import Emitter, wire


class TestBadQueries:
    @pytest.mark.parametrize("limit", ["abc", "-1", "0", "1e9"])
    def test_dead_letter_limit_that_is_not_a_number(self, daemon, limit):
        status, text = request(daemon.url + f"/api/alerts/dead?limit={limit}")
        assert status == 400 and "whole number" in json.loads(text)["error"]

    def test_dead_letter_limit_that_is(self, daemon):
        assert request(daemon.url + "/api/alerts/dead?limit=5")[0] == 200


class TestHugeFormField:
    def test_a_megabyte_preset_field_is_a_clear_400(self, daemon):
        boundary = "wtwinboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"preset\"\r\n\r\n".encode()
                + b"p" * (1 << 20)
                + f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                  f"filename=\"a.csv\"\r\nContent-Type: text/csv\r\n\r\nstep,loss\n1,2\n"
                  f"\r\n--{boundary}--\r\n".encode())
        status, text = request(daemon.url + "/api/analyze", "POST", body,
                               **{"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert status == 400 and "longer than 64 bytes" in json.loads(text)["error"]
        assert http_get(daemon.url + "/healthz")[0] == 200

    def test_a_normal_preset_field_still_works(self, daemon):
        boundary = "wtwinboundary"
        rows = "".join(f"{i},{3 - i / 1000}\n" for i in range(1, 400))
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"preset\"\r\n\r\n"
                f"finetuning\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"a.csv\"\r\nContent-Type: text/csv\r\n\r\nstep,loss\n{rows}"
                f"\r\n--{boundary}--\r\n").encode()
        status, text = request(daemon.url + "/api/analyze", "POST", body,
                               **{"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert status == 200, text
        assert json.loads(text)["preset"] == "finetuning"


class TestRunNames:
    @pytest.mark.parametrize("name", ["evil\r\nrun", "tab\there", "bell\x07"])
    def test_control_characters_are_refused_and_never_listed(self, daemon, name):
        raw = raw_dealer(daemon.tcp)
        raw.send(wire.encode({"v": 1, "type": "loss", "run": name, "seq": 1, "step": 1,
                              "loss": 2.0, "emitter": "e1"}))
        (reply,) = error_replies(raw, 1)
        assert reply["reason"] == "bad_run_name" and "control characters" in reply["message"]
        status, text = http_get(daemon.url + "/api/runs")
        assert status == 200 and name not in text and json.dumps(name)[1:-1] not in text
        raw.close()

    def test_the_emitter_refuses_such_a_name_at_once(self):
        with pytest.raises(ValueError, match="printable"):
            Emitter("ipc:///nonexistent/wtwind.sock", run="a\nb")


class TestRefusedStart:
    def test_a_run_start_whose_config_is_refused_creates_no_run(self, daemon):
        raw = raw_dealer(daemon.tcp)
        big = {f"k{i}": "x" * 1000 for i in range(40)}           # 40 KB, over max_config_bytes
        raw.send(wire.encode({"v": 1, "type": "run_start", "run": "ghost", "seq": 1, "config": big,
                              "emitter": "e1"}))
        (reply,) = error_replies(raw, 1)
        assert reply["reason"] == "config_quota"
        assert "ghost" not in http_get(daemon.url + "/api/runs")[1]
        raw.send(wire.encode({"v": 1, "type": "run_start", "run": "ghost", "seq": 2, "config": {"lr": 1},
                              "emitter": "e1"}))          # the same start with a fitting config is taken
        from helpers import wait_for
        wait_for(lambda: "ghost" in http_get(daemon.url + "/api/runs")[1], what="ghost registered")
        raw.close()


class TestRepliesDropped:
    def test_replies_a_peer_cannot_take_are_counted(self, tmp_path):
        """A peer that never reads: once its queue is full, each reply the daemon's socket
        cannot take is counted (wtwind_replies_dropped_total), not dropped in silence
        (ROUTER_MANDATORY); a reply to a peer that is gone is counted too."""
        import zmq

        from helpers import wait_for
        from wtwin.daemon.config import ListenConfig
        from wtwin.daemon.receiver import Receiver

        rx = Receiver(ListenConfig(endpoints=(f"ipc://{tmp_path}/r.sock",)), ctx=zmq.Context())
        rx.bind()
        peer = rx.ctx.socket(zmq.DEALER)
        peer.setsockopt(zmq.IDENTITY, b"deaf")
        peer.setsockopt(zmq.RCVHWM, 1)
        peer.connect(f"ipc://{tmp_path}/r.sock")
        peer.send(b"hello")
        wait_for(lambda: rx.sock.poll(100), what="the peer connected")
        identity = rx.sock.recv_multipart()[0]
        try:
            sent = sum(rx.send(identity, b"x" * 64) for _ in range(50_000))
            assert rx.send_dropped > 0 and sent + rx.send_dropped == 50_000
            before = rx.send_dropped
            assert rx.send(b"nobody", b"x") is False and rx.send_dropped == before + 1
        finally:
            peer.close(linger=0)
            rx.sock.close(linger=0)
