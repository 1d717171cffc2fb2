"""Trainer-side integration pieces: light imports, on_alert actions, LossBuffer, Tracker, the example."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _integrations import InProcessDaemon, wait_for  # noqa: E402
from wtwin.emitters.actions import AlertFilter, SaveCheckpoint, StopTraining, chain  # noqa: E402
from wtwin.emitters.buffer import LossBuffer  # noqa: E402
from wtwin.emitters.tracker import Tracker  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "numpy", "scipy", "transformers", "lightning", "pytorch_lightning", "wandb")


def alert(kind="drift", severity="warning", status="firing", step=10, started_at=1.0) -> dict:
    return {"run": "r", "kind": kind, "severity": severity, "status": status, "step": step,
            "W": 3.0, "started_at": started_at}


class TestLightImports:
    def test_framework_free_modules_import_no_heavy_package(self):
        """wtwin.emitters and its framework-free modules import neither torch, numpy nor any framework."""
        code = ("import sys, wtwin.emitters, wtwin.emitters.tracker, wtwin.emitters.actions, "
                "wtwin.emitters.buffer, wtwin.emitters.wandb, wtwin.emitters.torch; "
                f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        assert out.strip() == "[]"

    def test_torch_reexports_resolve_lazily(self):
        """wtwin.emitters.torch names the optimizer wrappers and resolves them on access."""
        import wtwin.emitters.torch as wt

        assert {"WTwinAdamW", "WTwinSGD", "WTwinLion", "Lion"} <= set(dir(wt))


class TestActions:
    def test_stop_training_trips_on_critical_only_by_default(self):
        """A warning or a resolved alert does not stop; the first critical firing does, and is kept."""
        stop = StopTraining()
        stop(alert(severity="warning"))
        stop(alert(severity="critical", status="resolved"))
        assert not stop
        first = alert(kind="nonfinite", severity="critical")
        stop(first)
        stop(alert(kind="divergence", severity="critical"))
        assert stop and stop.requested and stop.alert is first

    def test_filters_by_kind_and_severity(self):
        """min_severity is inclusive; kinds narrows; a bad severity is refused at construction."""
        f = AlertFilter("warning", kinds=("spike",))
        assert f.matches(alert("spike", "critical")) and f.matches(alert("spike", "warning"))
        assert not f.matches(alert("drift", "critical")) and not f.matches(alert("spike", "info"))
        with pytest.raises(ValueError, match="min_severity"):
            AlertFilter("page")

    def test_save_checkpoint_once_per_alert_and_chain_order(self):
        """One save per firing (run, kind, started_at); severity upgrades of it do not save again."""
        calls = []
        save = SaveCheckpoint(lambda a: calls.append(("save", a["step"])) or f"ckpt-{a['step']}")
        on_alert = chain(lambda a: calls.append(("log", a["step"])), save, None)
        on_alert(alert(step=10))
        on_alert(alert(step=12, severity="critical"))           # same alert, upgraded
        on_alert(alert(step=20, status="resolved"))
        on_alert(alert(step=30, started_at=2.0))                # a new firing
        assert calls == [("log", 10), ("save", 10), ("log", 12), ("log", 20), ("log", 30), ("save", 30)]
        assert save.saved == ["ckpt-10", "ckpt-30"]


class TestLossBuffer:
    def test_floats_flush_every_n(self):
        """Plain floats need no framework and come out at every n-th add, in order."""
        buf = LossBuffer(3)
        assert buf.add(1, 2.0) == [] and buf.add(2, 1.5, lr=0.1) == []
        assert buf.add(3, 1.0) == [(1, 2.0, None, None), (2, 1.5, 0.1, None), (3, 1.0, None, None)]
        assert len(buf) == 0 and buf.reads == 0

    def test_bad_every_is_refused(self):
        with pytest.raises(ValueError, match="log_every"):
            LossBuffer(0)


class TestTracker:
    def test_mode_follows_configuration(self, monkeypatch):
        """Embedded without a daemon configured; daemon mode with WTWIN_ENDPOINT or run=."""
        monkeypatch.delenv("WTWIN_ENDPOINT", raising=False)
        assert Tracker().mode == "embedded"
        with InProcessDaemon() as d:
            monkeypatch.setenv("WTWIN_ENDPOINT", d.endpoint)
            tr = Tracker(run="env-configured")
            assert tr.mode == "daemon"
            tr.loss(1, 2.0, lr=0.1)
            tr.close()
            wait_for(lambda: (r := d.server.table.get("env-configured")) and r.status == "completed",
                     10, what="run at the daemon")
            both = Tracker(run="both", embedded=True)
            assert both.mode == "daemon+embedded"
            state = both.loss(1, 2.0)
            assert state is not None and state.step == 1
            both.close()

    def test_disabled_or_non_zero_rank_does_nothing(self, monkeypatch):
        """enabled=False (a framework's "not global zero") or LOCAL_RANK=1: no events, no monitor."""
        off = Tracker(run="x", enabled=False, all_ranks=True)
        assert off.mode == "off" and off.loss(1, 1.0) is None and off.poll() == 0
        monkeypatch.setenv("LOCAL_RANK", "1")
        assert Tracker().mode == "off" and Tracker(all_ranks=True).mode == "embedded"

    def test_embedded_alert_has_the_daemon_alert_fields(self):
        """A non-finite loss in embedded mode gives an Alert.to_dict()-shaped dict, once."""
        got = []
        tr = Tracker(on_alert=got.append)
        for t in range(1, 30):
            tr.loss(t, 3.0 - 0.01 * t)
        tr.loss(30, float("inf"))
        tr.loss(31, float("inf"))
        firing = [a for a in got if a["status"] == "firing"]
        assert [a["kind"] for a in firing] == ["nonfinite"]
        a = firing[0]
        assert a["severity"] == "critical" and a["step"] == 30 and a["source"] == "embedded"
        assert {"run", "kind", "severity", "status", "step", "W", "loss", "forecast", "message",
                "started_at"} <= set(a)


@pytest.mark.slow  # 140 s on 2 busy cores (make test-all, CI)
class TestExample:
    def test_tiny_gpt_example_stops_on_the_daemon_alert(self, tmp_path):
        """examples/tiny_gpt.py with an LR blow-up: the daemon alerts, the example saves and stops."""
        pytest.importorskip("torch")
        with InProcessDaemon() as d:
            r = subprocess.run(
                [sys.executable, str(ROOT / "examples" / "tiny_gpt.py"), "--endpoint", d.endpoint,
                 "--run", "example", "--steps", "500", "--blowup-at", "250", "--out", str(tmp_path)],
                capture_output=True, text=True, timeout=240, env=dict(os.environ, PYTHONUNBUFFERED="1"))
            run = d.server.table.get("example")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "stopped at step" in r.stdout
        stopped = int(r.stdout.split("stopped at step ")[1].split(":")[0])
        assert 250 < stopped < 500
        assert run.status == "stopped"
        saved = list(tmp_path.glob("alert-*.pt"))
        assert saved and all(int(p.stem.rsplit("step", 1)[1]) > 250 for p in saved)

    def test_tiny_gpt_example_clean_run_with_its_own_daemon(self, tmp_path):
        """--with-daemon starts a private wtwind; a healthy cosine-schedule run gets no alert."""
        pytest.importorskip("torch")
        r = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "tiny_gpt.py"), "--with-daemon", "--steps", "300",
             "--out", str(tmp_path)], capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "wtwind up:" in r.stdout and "done: 300 steps" in r.stdout
        assert "alert firing" not in r.stdout and not list(tmp_path.glob("alert-*.pt"))
        assert "'dropped': 0" in r.stdout and "'unacked': 0" in r.stdout
