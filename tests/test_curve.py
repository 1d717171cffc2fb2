"""CURVE on the ROUTER: key generation, allow-listed clients in, unknown ones refused and
counted, and secrets never in the logs. Real daemon, real sockets, real ZAP handler."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import zmq
import zmq.auth

from helpers import Daemon, sample, wait_for
from wtwin.emitters.emitter import Emitter


def keygen(directory, name) -> tuple[str, str]:
    out = subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", "keys", "generate", "--dir",
                          str(directory), "--name", name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return str(directory / f"{name}.key"), str(directory / f"{name}.key_secret")


def curve_keys(tmp_path, allowed: tuple[str, ...], strangers: tuple[str, ...] = ()) -> tuple[dict, str, dict]:
    """A server key pair and one per client (``allowed`` ones on the allow-list): the daemon's
    environment, the server's public key file and each client's secret key file."""
    keys, allow_dir = tmp_path / "keys", tmp_path / "allowed"
    for folder in (keys, allow_dir, tmp_path / "d"):
        folder.mkdir()
    srv_pub, srv_sec = keygen(keys, "server")
    secret = {}
    for name in allowed + strangers:
        pub, secret[name] = keygen(keys, name)
        if name in allowed:
            os.rename(pub, allow_dir / f"{name}.key")
    env = {"WTWIND_CURVE__SERVER_KEY_FILE": srv_sec, "WTWIND_CURVE__ALLOWED_CLIENTS_DIR": str(allow_dir)}
    return env, srv_pub, secret


def client(endpoint, run, secret_file, server_public_file) -> Emitter:
    pub, sec = zmq.auth.load_certificate(secret_file)
    server = zmq.auth.load_certificate(server_public_file)[0]
    return Emitter(endpoint, run=run, heartbeat_s=3600,
                   curve={"secret_key": sec, "public_key": pub, "server_key": server})


class TestKeys:
    def test_generate_writes_a_loadable_pair_secret_readable_only_by_its_owner(self, tmp_path):
        """The secret file is 0600 and holds both halves; the public one is 0644 (it is
        copied to the daemon's clients folder, read by another user there)."""
        public, secret = keygen(tmp_path, "srv")
        assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(public).st_mode) == 0o644
        pub, sec = zmq.auth.load_certificate(secret)
        assert sec and zmq.curve_public(sec) == pub == zmq.auth.load_certificate(public)[0]


class TestCurveDaemon:
    @pytest.mark.slow  # 22 s on 2 busy cores (make test-all, CI)
    def test_allowed_client_gets_in_unknown_and_plain_ones_are_refused(self, tmp_path):
        """Only allow-listed public keys are served; refusals are counted."""
        env, srv_pub, secret = curve_keys(tmp_path, ("good",), ("stranger",))
        with Daemon(extra_env=env, tmpdir=str(tmp_path / "d")) as d:
            good = client(d.tcp, "trusted", secret["good"], srv_pub)
            bad = client(d.tcp, "intruder", secret["stranger"], srv_pub)
            plain = Emitter(d.tcp, run="plaintext", heartbeat_s=3600)
            for step in range(1, 21):
                for e in (good, bad, plain):
                    e.loss(step, 1.0 / step)
            wait_for(lambda: sample(d, "wtwind_run_step", run="trusted") == 20, what="trusted run")
            wait_for(lambda: (sample(d, "wtwind_curve_handshakes_total", outcome="refused") or 0) >= 1,
                     what="refusal counted")
            assert good.flush(10)
            assert sample(d, "wtwind_run_step", run="intruder") is None
            assert sample(d, "wtwind_run_step", run="plaintext") is None
            assert sample(d, "wtwind_curve_handshakes_total", outcome="accepted") >= 1
            for e in (good, bad, plain):
                e.close(timeout=1)
        assert "curve_client_refused" in d.log()


class TestSecretsStayOutOfLogs:
    def test_server_secret_from_env_is_never_logged(self, tmp_path):
        """The Z85 secret given by environment variable appears nowhere in the daemon's output."""
        pub, sec = zmq.curve_keypair()
        good_pub, good_sec = zmq.curve_keypair()
        (tmp_path / "d").mkdir()
        env = {"WTWIND_CURVE__SERVER_KEY_ENV": "TEST_WTWIND_CURVE_SECRET",
               "TEST_WTWIND_CURVE_SECRET": sec.decode(),
               "WTWIND_CURVE__ALLOWED_CLIENTS": good_pub.decode(), "WTWIND_LOG__LEVEL": "debug"}
        with Daemon(extra_env=env, tmpdir=str(tmp_path / "d")) as d:
            e = Emitter(d.tcp, run="s", heartbeat_s=3600,
                        curve={"secret_key": good_sec, "public_key": good_pub, "server_key": pub})
            e.loss(1, 1.0)
            assert e.flush(10)
            e.close(timeout=1)
            printed = subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", "--print-config"],
                                     env=d.env, capture_output=True, text=True, timeout=60)
        assert printed.returncode == 0, printed.stderr
        assert pub.decode() in d.log()  # the public key is logged, so the test can fail
        for text in (d.log(), printed.stdout, printed.stderr):
            assert sec.decode() not in text and good_sec.decode() not in text


class TestIpcPermissions:
    def test_ipc_socket_is_created_group_accessible_only(self, daemon):
        """The ipc endpoint is chmod'ed to listen.ipc_mode (0660): no access for others."""
        path = daemon.ipc[len("ipc://"):]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
