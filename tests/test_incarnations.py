"""A name used again is a new run (issue 37 item 4): a real wtwind, real emitters. The
ended run keeps its page, history and alerts under ``<name>~1``, reachable from the new
one; a resume stays explicit (``resume=True``)."""

from __future__ import annotations

import json
import math

from helpers import Daemon, http_get, wait_for

from wtwin.daemon.incarnations import archived_of
from wtwin.emitters import connect


def curve(t: int) -> float:
    return 2.0 + 8.0 * (t + 50) ** -0.45 + 0.02 * math.sin(t * 1.7)


def run_json(d, name: str) -> dict | None:
    from urllib.parse import quote

    status, body = http_get(f"{d.url}/api/runs/{quote(name, safe='')}", timeout=5)
    return json.loads(body) if status == 200 else None


def at(d, name: str, step: int, status: str | None = None) -> dict:
    def ok():
        r = run_json(d, name)
        return r if r and r.get("step") == step and (status is None or r["status"] == status) else None
    return wait_for(ok, 30, 0.05, f"{name} at step {step} ({status or 'any status'})")


def nan_run(d, name: str):
    e = connect(d.ipc, run=name)
    for t in range(1, 301):
        e.loss(t, curve(t) if t < 250 else float("nan"))
    return e


def test_archived_names_are_found_newest_first():
    names = {"a", "a~1", "a~2", "a~10", "a~x", "ab~3", "b~1"}
    assert archived_of("a", names) == ["a~10", "a~2", "a~1"]


class TestNameUsedAgain:
    def test_a_new_run_after_run_end_keeps_the_old_page_and_alerts(self, tmp_path):
        """The NaN run's page, its 300 points and its critical stay under mlp-nan~1; the
        new mlp-nan has its own 120 points, no resume_jump and no NaN alert, and each page
        links the other. After a restart the archived run is read from the store."""
        d = Daemon(tmpdir=str(tmp_path)).start()
        try:
            old = nan_run(d, "mlp-nan")
            at(d, "mlp-nan", 300)
            old.close("failed")
            at(d, "mlp-nan", 300, "failed")
            new = connect(d.ipc, run="mlp-nan")
            for t in range(1, 121):
                new.loss(t, curve(t))
            cur = at(d, "mlp-nan", 120, "running")
            arch = at(d, "mlp-nan~1", 300, "failed")
            assert cur["names"] == {"earlier": ["mlp-nan~1"], "current": None}
            assert arch["names"] == {"earlier": [], "current": "mlp-nan"}
            kinds = {m["kind"] for m in cur["markers"]}
            assert not kinds & {"nonfinite", "resume_jump"}, cur["markers"]
            assert any(m["kind"] == "nonfinite" and m["severity"] == "critical"
                       for m in arch["markers"]), arch["markers"]
            assert len(cur["series"]["step"]) == 120 and max(arch["series"]["step"]) == 300
            assert '"event": "run_name_reused"' in d.log()
            new.close("completed")
            at(d, "mlp-nan", 120, "completed")
        finally:
            d.stop()
        gone = {"WTWIND_RUNS__ENDED_TTL_S": "0", "WTWIND_RUNS__ENDED_SERIES_S": "0"}
        with Daemon(tmpdir=str(tmp_path), extra_env=gone) as d2:   # both from the store
            arch = at(d2, "mlp-nan~1", 300, "failed")
            assert arch["stored"] and arch["names"]["current"] == "mlp-nan"
            assert any(m["kind"] == "nonfinite" for m in arch["markers"]), arch["markers"]
            cur = at(d2, "mlp-nan", 120, "completed")
            assert cur["names"]["earlier"] == ["mlp-nan~1"]
            third = connect(d2.ipc, run="mlp-nan")   # a stored ended run's name: read, then archived
            for t in range(1, 41):
                third.loss(t, curve(t))
            cur = at(d2, "mlp-nan", 40, "running")
            assert cur["names"]["earlier"] == ["mlp-nan~2", "mlp-nan~1"]
            assert at(d2, "mlp-nan~2", 120, "completed")["names"]["current"] == "mlp-nan"
            third.close()

    def test_resume_true_goes_on_with_the_ended_run(self, tmp_path):
        """``resume=True`` (what the callbacks send on a checkpoint resume) continues the
        ended run: no archived name, its alerts and points stay one run's."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            first = connect(d.ipc, run="goes-on")
            for t in range(1, 201):
                first.loss(t, curve(t))
            first.close("completed")
            at(d, "goes-on", 200, "completed")
            again = connect(d.ipc, run="goes-on", resume=True)
            for t in range(201, 301):
                again.loss(t, curve(t))
            cur = at(d, "goes-on", 300, "running")
            assert cur["names"] == {"earlier": [], "current": None}
            assert run_json(d, "goes-on~1") is None
            assert len(cur["series"]["step"]) == 300
            again.close()

    def test_a_third_run_of_the_name_is_archived_as_2(self, tmp_path):
        with Daemon(tmpdir=str(tmp_path)) as d:
            for k, n in enumerate((50, 60, 70)):
                e = connect(d.ipc, run="thrice")
                for t in range(1, n + 1):
                    e.loss(t, curve(t))
                e.close("completed")
                at(d, "thrice", n, "completed")
            assert run_json(d, "thrice")["names"]["earlier"] == ["thrice~2", "thrice~1"]
            assert at(d, "thrice~1", 50)["step"] == 50 and at(d, "thrice~2", 60)["step"] == 60


def test_emitter_resume_sends_resumed_from():
    from wtwin.emitters.settings import EmitterSettings

    assert EmitterSettings(run="r", resume=True).run_start()["resumed_from"] == "r"
    assert "resumed_from" not in EmitterSettings(run="r").run_start()
    assert EmitterSettings(run="r", resume=True, resumed_from="q").run_start()["resumed_from"] == "q"


class TestCallbacksResume:
    """What the callbacks send: a checkpoint resume goes on with the run, a fresh
    training of the same name is a new run (against a real wtwind)."""

    class Args:
        learning_rate, per_device_train_batch_size, gradient_accumulation_steps = 1e-3, 2, 1
        world_size, lr_scheduler_type, output_dir = 1, "linear", None

    def begin(self, d, tmp_path, monkeypatch, step: int):
        import pytest

        transformers = pytest.importorskip("transformers")
        from wtwin.emitters.hf import WTwinCallback

        monkeypatch.setenv("WTWIN_SECRET_DIR", str(tmp_path / "secrets"))

        class State:
            max_steps, is_world_process_zero, global_step = 400, True, step

        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=1, n_embd=8,
                                                                     vocab_size=16))
        cb = WTwinCallback(endpoint=d.ipc, run="hf-run", raw_loss=False, embedded=False)
        cb.on_train_begin(self.Args(), State(), None, model=model)
        return cb.tracker.emitter

    def test_hf_resume_from_checkpoint_goes_on_and_a_fresh_start_is_new(self, tmp_path, monkeypatch):
        with Daemon(tmpdir=str(tmp_path)) as d:
            first = self.begin(d, tmp_path, monkeypatch, 0)
            assert "resumed_from" not in first.settings.run_start()
            for t in range(1, 101):
                first.loss(t, curve(t))
            first.close("completed")
            at(d, "hf-run", 100, "completed")
            resumed = self.begin(d, tmp_path, monkeypatch, 100)   # resume_from_checkpoint
            assert resumed.settings.run_start()["resumed_from"] == "hf-run"
            for t in range(101, 151):
                resumed.loss(t, curve(t))
            assert len(at(d, "hf-run", 150, "running")["series"]["step"]) == 150
            resumed.close("completed")
            at(d, "hf-run", 150, "completed")
            fresh = self.begin(d, tmp_path, monkeypatch, 0)       # trained again from scratch
            for t in range(1, 31):
                fresh.loss(t, curve(t))
            assert at(d, "hf-run", 30, "running")["names"]["earlier"] == ["hf-run~1"]
            assert at(d, "hf-run~1", 150, "completed")
            fresh.close()

    def test_lightning_fit_from_a_checkpoint_sends_a_resume(self, tmp_path, monkeypatch):
        """``fit(ckpt_path=...)`` sets ``trainer.ckpt_path`` before ``setup``: the run_start
        says ``resumed_from``; a plain ``fit`` does not."""
        import pytest

        pytest.importorskip("lightning")
        from wtwin.emitters.lightning import WTwinCallback

        monkeypatch.setenv("WTWIN_SECRET_DIR", str(tmp_path / "secrets"))

        class Trainer:
            max_steps, max_epochs, world_size, accumulate_grad_batches = 10, 1, 1, 1
            is_global_zero, default_root_dir, checkpoint_callbacks = True, str(tmp_path), ()

            def __init__(self, ckpt_path):
                self.ckpt_path = ckpt_path

        with Daemon(tmpdir=str(tmp_path)) as d:
            sent = {}
            for name, ckpt in (("fresh", None), ("resumed", str(tmp_path / "last.ckpt"))):
                cb = WTwinCallback(run=f"pl-{name}", endpoint=d.ipc, embedded=False)
                cb.setup(Trainer(ckpt), object(), "fit")
                sent[name] = cb.tracker.emitter.settings.run_start().get("resumed_from")
                cb.tracker.emitter.close()
            assert sent == {"fresh": None, "resumed": "pl-resumed"}
