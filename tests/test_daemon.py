"""wtwind end to end: malformed input, metrics, alerts back to the trainer, lifecycle."""

import json
import math
import signal
import threading

import msgpack

from helpers import Daemon, http_get, raw_dealer, sample, wait_for
from wtwin.emitters import connect, wire


class TestMalformedFrames:
    def test_bad_frames_are_counted_by_reason_and_good_ones_still_processed(self, daemon):
        sock = raw_dealer(daemon.tcp)
        good = {"v": 1, "type": "loss", "run": "mixed", "seq": 1, "step": 1, "loss": 1.0}
        bad = [b"\xc1garbage", msgpack.packb("str"), wire.encode({**good, "v": 9}),
               wire.encode({**good, "type": "nope"}), wire.encode({**good, "loss": None}),
               wire.encode({**good, "step": "1"}), wire.encode({**good, "pad": "x" * (1 << 20)})]
        for i, frame in enumerate(bad):
            sock.send(frame)
            sock.send(wire.encode({**good, "seq": i + 2, "step": i + 2}))
        sock.send_multipart([b"two", b"parts"])
        sock.close()
        huge = raw_dealer(daemon.tcp)  # far over the limit: libzmq drops that peer before decode
        huge.send(b"\x00" * (4 << 20))
        huge.close()
        wait_for(lambda: sample(daemon, "wtwind_events_received_total", type="loss") == len(bad),
                 what="every good frame processed")
        for reason in ("undecodable", "not_a_map", "bad_version", "unknown_type",
                       "missing_field", "bad_type", "oversized"):
            assert sample(daemon, "wtwind_events_rejected_total", reason=reason) == 1, reason
        assert http_get(daemon.url + "/healthz")[0] == 200
        assert "frame_rejected" in daemon.log()


class TestMetrics:
    def test_metrics_parse_and_carry_run_series(self, daemon):
        with connect(daemon.ipc, run="m1") as emit:
            for step in range(1, 11):
                emit.loss(step, 5.0 / step)
            wait_for(lambda: sample(daemon, "wtwind_run_step", run="m1") == 10, what="step 10")
            m = daemon.metrics()
            assert m[("wtwind_run_loss", (("run", "m1"),))] == 0.5
            assert m[("wtwind_active_runs", ())] == 1
            assert ("wtwind_build_info", (("version", m and next(
                l for (n, l) in m if n == "wtwind_build_info")[0][1]),)) in m
            assert m[("wtwind_run_last_event_timestamp_seconds", (("run", "m1"),))] > 1e9
        # run_end: the run's series vanish
        wait_for(lambda: sample(daemon, "wtwind_run_step", run="m1") is None, what="series gone")
        assert sample(daemon, "wtwind_active_runs") == 0

    def test_health_and_readiness(self, daemon):
        assert http_get(daemon.url + "/healthz")[0] == 200
        assert http_get(daemon.url + "/readyz")[0] == 200


class TestAlerts:
    def test_degrading_run_alerts_and_the_trainer_gets_it_on_its_own_thread(self, daemon):
        got, threads = [], []

        def on_alert(alert):
            got.append(alert)
            threads.append(threading.get_ident())

        emit = connect(daemon.ipc, run="degrade", on_alert=on_alert)
        step = 0
        for step in range(1, 4001):
            drift = 0.0005 * (step - 2000) if step > 2000 else 0.0
            emit.loss(step, 2.0 + 5.0 / step ** 0.5 + drift + 0.01 * ((step * 7919) % 13 - 6) / 6)
        def degradation_alerts():
            return [labels for (name, labels), v in daemon.metrics().items()
                    if name == "wtwind_run_alert_active" and ("run", "degrade") in labels
                    and dict(labels)["kind"] in ("drift", "divergence")]

        wait_for(degradation_alerts, timeout=20, what="a degradation alert")
        wait_for(lambda: emit.poll() or any(a["kind"] in ("drift", "divergence") for a in got),
                 what="the alert back at the trainer")
        emit.close()       # it may deliver alerts sent since: each was counted before it was sent
        fired = daemon.metrics()
        assert all(a["step"] > 2000 for a in got if a["status"] == "firing"), got
        assert set(threads) == {threading.get_ident()}
        counted = {dict(labels)["kind"] for (name, labels), v in fired.items()
                   if name == "wtwind_alerts_total" and v >= 1}
        assert {a["kind"] for a in got} <= counted

    def test_a_resumed_run_is_not_an_alert(self, daemon):
        """A trainer crashes at step 3000 and its successor resumes from the step-2000
        checkpoint (a new emitter, cosine lr): the repeated steps page nothing, and the
        run page gets the resume as an info marker."""
        def lr(t):
            return 1e-3 * min(1.0, t / 200) * (0.5 + 0.5 * math.cos(math.pi * t / 6000))

        def loss(t):
            return 2.0 + 5.0 / t ** 0.5 + 0.01 * ((t * 7919) % 13 - 6) / 6

        with connect(daemon.ipc, run="resumed") as first:
            for t in range(1, 3001):
                first.loss(t, loss(t), lr=lr(t))
        with connect(daemon.ipc, run="resumed", resume=True) as second:   # an explicit resume
            for t in range(2001, 6001):
                second.loss(t, loss(t), lr=lr(t))
        def page():
            status, body = http_get(daemon.url + "/api/runs/resumed")
            doc = json.loads(body) if status == 200 else {}
            return doc if doc.get("step") == 6000 else None

        markers = wait_for(page, timeout=30, what="the resumed run at step 6000")["markers"]
        assert [m for m in markers if m["severity"] != "info"] == []
        (m,) = [m for m in markers if m["kind"] == "resume_jump" and m["status"] == "firing"]
        assert m["step"] == 2001 and "rewound to step" in m["message"]

    def test_nonfinite_loss_is_critical_at_once(self, daemon):
        with connect(daemon.ipc, run="nan") as emit:
            emit.loss(1, 2.0)
            emit.loss(2, float("nan"))
            wait_for(lambda: sample(daemon, "wtwind_run_alert_severity", run="nan",
                                    kind="nonfinite") == 3, what="nonfinite")


class TestRunKind:
    def test_kind_picks_the_preset_and_a_named_preset_wins(self, daemon):
        """run_start.kind "finetuning" -> preset finetuning; with preset named too, the preset;
        a kind the daemon does not know -> the daemon's default."""
        cases = {"ft": ({"kind": "finetuning"}, "finetuning"),
                 "cpt": ({"kind": "continued_pretraining"}, "adaptive_pretraining"),
                 "both": ({"kind": "finetuning", "preset": "pretraining"}, "pretraining"),
                 "odd": ({"kind": "rlhf"}, "pretraining")}
        for run, (fields, _) in cases.items():
            with connect(daemon.ipc, run=run, **fields) as emit:
                emit.loss(1, 2.0)

        def presets():
            out = {}
            for run in cases:
                status, body = http_get(f"{daemon.url}/api/runs/{run}")
                if status == 200 and json.loads(body).get("step") == 1:
                    out[run] = json.loads(body)["preset"]
            return out if len(out) == len(cases) else None

        got = wait_for(presets, what="the four runs")
        assert got == {run: want for run, (_, want) in cases.items()}
        started = {json.loads(line)["run"]: json.loads(line) for line in daemon.log().splitlines()
                   if '"event": "run_started"' in line}
        assert started["ft"]["preset_from"] == "run_start.kind" and started["ft"]["kind"] == "finetuning"
        assert started["both"]["preset_from"] == "run_start.preset"
        assert started["odd"]["preset_from"] == "default" and started["odd"]["preset"] == "pretraining"


class TestStall:
    def test_silent_run_is_reported_stalled(self, tmp_path):
        env = {"WTWIND_DETECTION__STALL_AFTER_S": "0.5", "WTWIND_TICK_S": "0.1"}
        with Daemon(env, tmpdir=str(tmp_path)) as d:
            emit = connect(d.ipc, run="quiet", heartbeat_s=0.1)
            emit.loss(1, 1.0)
            wait_for(lambda: sample(d, "wtwind_run_alert_active", run="quiet", kind="stalled") == 1
                     and sample(d, "wtwind_run_alert_severity", run="quiet", kind="stalled") == 2,
                     what="stalled alert")
            emit.loss(2, 1.0)
            wait_for(lambda: sample(d, "wtwind_run_alert_active", run="quiet", kind="stalled") is None,
                     what="stall resolved")
            emit.close()


class TestLifecycle:
    def test_sigterm_drains_what_arrived_and_exits_zero(self, tmp_path):
        d = Daemon(tmpdir=str(tmp_path)).start()
        with connect(d.ipc, run="drain") as emit:
            for step in range(1, 20001):
                emit.loss(step, 1.0)
        wait_for(lambda: sample(d, "wtwind_run_step", run="drain") or True)
        assert d.stop(signal.SIGTERM, timeout=15) == 0
        assert '"event": "stopped"' in d.log()

    def test_second_signal_forces_exit_while_draining(self, tmp_path):
        """A drain blocked on a sink that never answers: the second signal ends it at once."""
        import socket
        import time
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)                     # accepts connections, never reads or answers
        cfg = tmp_path / "wtwind.toml"
        cfg.write_text(f"""
shutdown_timeout_s = 60.0
[detection]
cooldown_s = 0.0
[delivery]
drain_timeout_s = 60.0
[[sinks]]
type = "webhook"
name = "blackhole"
url = "http://127.0.0.1:{hole.getsockname()[1]}/hook"
timeout_s = 60.0
""")
        d = Daemon(args=("--config", str(cfg)), tmpdir=str(tmp_path)).start()
        try:
            with connect(d.ipc, run="stuck") as emit:
                emit.loss(1, 2.0)
                emit.loss(2, float("nan"))      # a critical alert for the sink to (never) take
                wait_for(lambda: sample(d, "wtwind_run_alert_severity", run="stuck",
                                        kind="nonfinite") == 3, what="alert")
            d.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: '"event": "stopping"' in d.log(), what="first signal handled")
            time.sleep(1.0)
            assert d.proc.poll() is None, "the drain should still be waiting on the sink"
            t0 = time.monotonic()
            d.proc.send_signal(signal.SIGINT)
            assert d.proc.wait(45) == 1
            # the drain would wait for the sink's 60 s timeout: well under it, it did not
            assert time.monotonic() - t0 < 45
            assert '"event": "forced_exit"' in d.log()
        finally:
            d.kill()
            hole.close()

    def test_bind_failure_is_a_clear_error(self, daemon, tmp_path):
        other = Daemon(tmpdir=str(tmp_path / "b"))
        other.env["WTWIND_LISTEN__ENDPOINTS"] = daemon.tcp
        other.proc = None
        import subprocess, sys
        r = subprocess.run([sys.executable, "-m", "wtwin.daemon.cli"], env=other.env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "cannot bind" in r.stderr and daemon.tcp in r.stderr
