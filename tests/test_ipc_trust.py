"""The emitter connects to an ipc socket only where nobody but the trainer's user (or root)
could have put it: a squatted folder gets no events and no secret (issue 24)."""

from __future__ import annotations

import os
import shutil
import stat

import pytest
import zmq

from wtwin.emitters import Emitter
from wtwin.emitters import ipc_trust
from wtwin.emitters.endpoints import default_ipc_endpoint

ME, OTHER, DAEMON_USER = 1000, 2000, 3000
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="making another user's files needs root")


def _tmp(root):
    """A folder like /tmp: root's, sticky, writable by everyone."""
    return _dir(root / "tmp", 0, 0o1777)


def _dir(path, owner, mode):
    path.mkdir()
    os.chown(path, owner, owner)
    os.chmod(path, mode)
    return path


@needs_root
class TestJudge:
    def test_own_private_folder_is_trusted(self, tmp_path):
        d = _dir(tmp_path / "mine", ME, 0o700)
        assert ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME) is None

    def test_folder_of_another_user_is_refused(self, tmp_path):
        d = _dir(_tmp(tmp_path) / f"wtwind-{ME}", OTHER, 0o755)   # squatted in a shared /tmp
        why = ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME)
        assert why and f"belongs to uid {OTHER}" in why

    def test_folder_writable_by_others_is_refused(self, tmp_path):
        d = _dir(tmp_path / "open", ME, 0o777)
        why = ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME)
        assert why and "writable by other users" in why

    def test_sticky_shared_folder_is_refused_as_the_sockets_folder(self, tmp_path):
        d = _tmp(tmp_path)
        assert "writable by other users" in ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME)

    def test_missing_folder_others_could_create_is_refused(self, tmp_path):
        d = _tmp(tmp_path)
        why = ipc_trust.problem(f"ipc://{d}/wtwind-{ME}/wtwind.sock", uid=ME)
        assert why and "other users could create it" in why

    def test_missing_folder_in_a_private_parent_is_fine(self, tmp_path):
        d = _dir(tmp_path / "run", ME, 0o700)
        assert ipc_trust.problem(f"ipc://{d}/wtwind/wtwind.sock", uid=ME) is None

    def test_folder_root_gave_to_the_daemon_user_is_trusted(self, tmp_path):
        run = _dir(tmp_path / "run", 0, 0o755)            # like /run: root's, closed to others
        d = _dir(run / "wtwind", DAEMON_USER, 0o750)      # systemd RuntimeDirectory=wtwind
        assert ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME) is None

    def test_daemon_users_folder_in_a_users_parent_is_refused(self, tmp_path):
        parent = _dir(tmp_path / "home", OTHER, 0o755)
        d = _dir(parent / "wtwind", DAEMON_USER, 0o750)
        assert ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME)

    def test_symlinked_socket_folder_is_refused(self, tmp_path):
        real = _dir(tmp_path / "real", ME, 0o700)
        (tmp_path / "link").symlink_to(real)
        assert "symbolic link" in ipc_trust.problem(f"ipc://{tmp_path}/link/wtwind.sock", uid=ME)

    def test_socket_of_a_stranger_is_refused(self, tmp_path):
        d = _dir(tmp_path / "mine", ME, 0o700)
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.ROUTER)
        try:
            sock.bind(f"ipc://{d}/wtwind.sock")
            os.lchown(d / "wtwind.sock", OTHER, OTHER)
            assert f"belongs to uid {OTHER}" in ipc_trust.problem(f"ipc://{d}/wtwind.sock", uid=ME)
        finally:
            sock.close(linger=0)

    def test_tcp_is_not_judged_here(self):
        assert ipc_trust.problem("tcp://127.0.0.1:5557") is None


class TestDefaultFolder:
    def test_default_tmp_folder_is_created_private(self):
        uid = 970_000 + os.getpid() % 10_000   # a uid nobody has: its folder is ours to make
        folder = ipc_trust.default_tmp_folder(uid)
        shutil.rmtree(folder, ignore_errors=True)
        try:
            ipc_trust.problem(f"ipc://{folder}/wtwind.sock", uid=uid)
            st = os.stat(folder)
            assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def test_default_endpoint_uses_it_without_runtime_dirs(self):
        if os.path.isdir("/run/wtwind"):
            pytest.skip("this machine has a system wtwind's /run/wtwind")
        assert default_ipc_endpoint({}) == f"ipc://{ipc_trust.default_tmp_folder()}/wtwind.sock"


def _squatter(folder):
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(f"ipc://{folder}/wtwind.sock")
    return sock


def _events_seen(sock, wait_ms):
    n = 0
    while sock.poll(wait_ms):
        sock.recv_multipart()
        n += 1
        wait_ms = 50
    return n


@needs_root
class TestSquattedSocket:
    """A real socket bound by "another user": the emitter stays away from it."""

    def test_emitter_refuses_and_sends_nothing(self, tmp_path, caplog):
        folder = _dir(_tmp(tmp_path) / "wtwind-0", OTHER, 0o755)
        squat = _squatter(folder)
        try:
            em = Emitter(f"ipc://{folder}/wtwind.sock", run="victim", ack_timeout_s=0.2)
            em.loss(1, 2.5)
            em.close(timeout=1.0)
            stats = em.stats
            assert stats["untrusted_endpoint"] == 1 and stats.get("sent", 0) == 0
            assert _events_seen(squat, 0) == 0
            assert any("belongs to uid 2000" in r.getMessage() for r in caplog.records)
        finally:
            squat.close(linger=0)

    def test_the_same_socket_in_our_folder_gets_the_events(self, tmp_path):
        folder = _dir(tmp_path / "wtwind-mine", os.getuid(), 0o700)
        squat = _squatter(folder)
        try:
            em = Emitter(f"ipc://{folder}/wtwind.sock", run="victim", ack_timeout_s=0.2)
            em.loss(1, 2.5)
            assert _events_seen(squat, 10_000) >= 1      # waits for the frame, up to 10 s
            em.close(timeout=0.5)
        finally:
            squat.close(linger=0)
