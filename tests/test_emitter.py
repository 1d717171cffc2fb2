"""The emitter against a real wtwind over real ZeroMQ sockets."""

import json
import logging
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers import Daemon, free_port, http_get, wait_for
from wtwin.emitters import Emitter, NullEmitter, connect


def received(d, kind="loss"):
    return d.metrics().get(("wtwind_events_received_total", (("type", kind),)), 0)


class TestLightImport:
    def test_emitters_import_only_pyzmq_and_msgpack(self):
        code = ("import sys, wtwin.emitters; "
                "print(sorted(m for m in ('numpy','scipy','torch','prometheus_client','aiohttp',"
                "'wtwin.daemon') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "[]"


class TestDelivery:
    @pytest.mark.parametrize("which", ["ipc", "tcp"])
    def test_events_arrive_over_each_transport(self, daemon, which):
        with connect(getattr(daemon, which), run=f"t-{which}") as emit:
            for step in range(1, 501):
                emit.loss(step, 3.0 - step * 1e-3, lr=1e-3)
            emit.eval(500, val_loss=2.6)
        wait_for(lambda: received(daemon) == 500, what="500 loss events")
        m = daemon.metrics()
        assert received(daemon, "eval") == 1
        assert m.get(("wtwind_events_received_total", (("type", "run_start"),))) == 1

    @pytest.mark.slow  # 15 s on 2 busy cores (make test-all, CI)
    def test_many_emitters_at_once(self, daemon):
        emitters = [connect(daemon.tcp, run=f"many-{i}") for i in range(16)]
        for step in range(1, 301):
            for e in emitters:
                e.loss(step, 2.0)
        for e in emitters:
            e.close()
        wait_for(lambda: received(daemon) == 16 * 300, what="all events from 16 emitters")
        assert sum(e.stats["dropped"] for e in emitters) == 0

    def test_numpy_scalars_and_torch_tensors_are_accepted(self, daemon):
        emit = connect(daemon.ipc, run="types")
        emit.loss(np.int64(1), np.float32(2.5), lr=np.float64(1e-3))
        emit.loss(torch.tensor(2), torch.tensor(2.25, requires_grad=True) * 1.0)
        wait_for(lambda: received(daemon) == 2, what="2 events")
        m = daemon.metrics()
        emit.close()
        assert m[("wtwind_run_loss", (("run", "types"),))] == 2.25
        assert m[("wtwind_run_step", (("run", "types"),))] == 2

    def test_unconvertible_values_are_counted_never_raised(self, daemon):
        with connect(daemon.ipc, run="bad-values") as emit:
            emit.loss(1, "not a number")
            emit.loss(2, 1.5)
        assert emit.stats["invalid"] == 1
        wait_for(lambda: received(daemon) == 1, what="the one good event")


class TestDaemonDown:
    def test_emitter_neither_blocks_nor_raises_then_delivers_when_daemon_comes_up(self, tmp_path):
        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        emit = Emitter(endpoint, run="late", queue_size=200, config={"model": "tiny"})
        took = []
        for step in range(1, 3001):
            t0 = time.perf_counter()
            emit.loss(step, 1.0)
            took.append(time.perf_counter() - t0)
        # A call that waited on the absent daemon would wait on every call past the queue's
        # 200 (forever, on a DEALER with no peer): the median says so whatever the machine's
        # load, where one call's worst case is the scheduler's (a preempted call on a busy
        # machine); the worst case guards only a hang.
        took.sort()
        assert took[len(took) // 2] < 0.005, f"emit.loss took {took[len(took) // 2] * 1e3:.1f} ms (median)"
        assert took[-1] < 5.0, f"emit.loss blocked for {took[-1]:.1f} s with the daemon down"
        d = Daemon(tmpdir=str(tmp_path))
        d.tcp = endpoint
        d.env["WTWIND_LISTEN__ENDPOINTS"] = f"{d.ipc},{endpoint}"
        with d:
            # the emitter finds the daemon that came up on its own (acks), before close();
            # close() then returns once its thread has sent and heard its acks: the
            # timeouts guard a hang only
            wait_for(lambda: emit.stats["acked"] > 0, 120, what="acks from the daemon that came up")
            emit.close(timeout=120)
            total = 3000 + 2  # the loss events, run_start and run_end

            def accounted():
                got = sum(received(d, kind) for kind in ("loss", "run_start", "run_end"))
                return got + emit.stats["dropped"] == total

            wait_for(accounted, timeout=120, what="every event either delivered or counted as dropped")
            assert received(d) > 0
            assert received(d, "run_start") == 1  # never the one dropped: the config survives
            status, body = http_get(d.url + "/api/runs/late")
            assert status == 200 and json.loads(body)["config"] == {"model": "tiny"}


class TestUnreachableDaemon:
    def test_warns_once_with_the_endpoint_then_once_when_acks_come_back(self, tmp_path, caplog):
        """No daemon listens: one warning naming the endpoint; wtwind starts there: one recovery line."""
        caplog.set_level(logging.WARNING, logger="wtwin.emitters")
        d = Daemon(tmpdir=str(tmp_path))
        emit = Emitter(d.tcp, run="nobody-home", warn_unacked_s=0.5, heartbeat_s=0.1)
        for step in range(1, 21):
            emit.loss(step, 2.0)
        wait_for(lambda: emit.stats["unreachable"] == 1, 10, what="the emitter to call the daemon unreachable")
        assert emit.stats["acked"] == 0 and emit.stats["no_ack_s"] >= 0
        time.sleep(1.5)  # three more warning periods, heartbeats still unanswered: still one line
        silent = [r.getMessage() for r in caplog.records if "nothing acked" in r.getMessage()]
        assert len(silent) == 1 and d.tcp in silent[0], silent
        assert "events waiting" in silent[0]
        with d:
            wait_for(lambda: emit.stats["unreachable"] == 0, 20, what="acks from the daemon that started")
            assert emit.flush(10) and emit.stats["acked"] >= 21
            emit.close()
        back = [r.getMessage() for r in caplog.records if "acks again" in r.getMessage()]
        warned = [r.getMessage() for r in caplog.records if "nothing acked" in r.getMessage()]
        # one recovery line per silence: on a busy machine the daemon's first commits can
        # take longer than warn_unacked_s (0.5 s), a second silence with its own two lines
        assert len(back) >= 1 and len(back) == len(warned) and all(d.tcp in m for m in back), (warned, back)

    def test_a_short_run_with_no_daemon_says_so_on_stderr_at_close(self, tmp_path):
        """Shorter than the warning period, no logging configured: the line still reaches stderr."""
        endpoint = f"ipc://{tmp_path}/nobody.sock"
        code = ("import wtwin.emitters as w; e = w.connect(%r, run='short'); "
                "[e.loss(i, 1.0) for i in range(202)]; e.close()" % endpoint)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "never acked by wtwind at " + endpoint in out.stderr, out.stderr

    def test_a_daemon_that_acks_gets_no_warning(self, daemon, caplog):
        caplog.set_level(logging.WARNING, logger="wtwin.emitters")
        # a warning period a loaded machine's daemon answers within, twice over
        with Emitter(daemon.tcp, run="fine", warn_unacked_s=3.0) as emit:
            end, step = time.monotonic() + 6.0, 0  # twice the warning period, acks flowing
            while time.monotonic() < end:
                step += 1
                emit.loss(step, 2.0)
                time.sleep(0.01)
            assert emit.flush(10)
            assert emit.stats["unreachable"] == 0 and emit.stats["acked"] > step
        assert not [r for r in caplog.records if r.name == "wtwin.emitters"]


class TestNullEmitter:
    @pytest.mark.parametrize("env", [{"WTWIN_DISABLE": "1"}, {"RANK": "3"}, {"LOCAL_RANK": "1"}])
    def test_disabled_or_non_zero_rank_gives_a_null_emitter(self, monkeypatch, env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        emit = connect("tcp://127.0.0.1:1", run="x")
        assert isinstance(emit, NullEmitter)
        emit.loss(1, 1.0)
        emit.close()

    def test_generated_run_id_is_printed_once(self, capsys):
        emit = connect("tcp://127.0.0.1:1")
        emit.close(timeout=1)
        assert emit.run in capsys.readouterr().err


class TestRunSecret:
    """The per-run secret: created once (0600), found again by a resumed trainer."""

    def test_created_once_private_and_read_back(self, tmp_path):
        from wtwin.emitters import run_secret

        env = {"HOME": str(tmp_path)}
        first = run_secret.load_or_create("a/b c", tmp_path / "ckpt", environ=env)
        path = run_secret.secret_path("a/b c", tmp_path / "ckpt")
        assert path.parent == tmp_path / "ckpt" and path.name.endswith(".wtwin-secret")
        assert path.stat().st_mode & 0o777 == 0o600
        assert run_secret.load_or_create("a/b c", tmp_path / "ckpt", environ=env) == first
        assert run_secret.load_or_create("other", tmp_path / "ckpt", environ=env) != first

    def test_environment_wins(self, tmp_path):
        from wtwin.emitters import run_secret

        env = {"WTWIN_RUN_SECRET": "from-env", "HOME": str(tmp_path)}
        assert run_secret.load_or_create("r", tmp_path, environ=env) == "from-env"
        env = {"WTWIN_SECRET_DIR": str(tmp_path / "op"), "HOME": str(tmp_path)}
        run_secret.load_or_create("r", tmp_path / "lib", environ=env)
        assert (tmp_path / "op" / "r.wtwin-secret").exists()
