"""Hugging Face Trainer + WTwinCallback against a real wtwind: a tiny GPT-2 on CPU, no download.

The model is built from a ``GPT2Config`` (2 layers, 32 wide); the data are random token
sequences following a learnable rule (each token is the previous one plus a fixed
stride), so the loss falls like a real run's. Part-way, the learning rate is multiplied
by 1000 (a schedule bug): the daemon must alert and the callback must stop training.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _integrations import InProcessDaemon, KickAt, one_torch_thread, run_result, wait_for  # noqa: E402,F401
from wtwin.emitters.hf import WTwinCallback  # noqa: E402

VOCAB, SEQ, MAX_STEPS, BLOWUP_AT = 48, 24, 400, 220
LOSS_KINDS = ("drift", "spike", "divergence", "nonfinite", "plateau")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class PatternData(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCAB, (n, 1), generator=g)
        stride = torch.randint(1, 4, (n, 1), generator=g)
        self.ids = (start + stride * torch.arange(SEQ)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def make_trainer(tmp_path, callback, *, max_steps=MAX_STEPS, blowup_at=BLOWUP_AT, **args):
    from transformers import Trainer, TrainingArguments

    model = tiny_gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    factor = (lambda s: 1.0 if s < blowup_at else 1000.0) if blowup_at else (lambda s: 1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    args = {"save_strategy": "no", "logging_steps": 1, "logging_nan_inf_filter": False, **args}
    targs = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=max_steps, per_device_train_batch_size=8,
        report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=0, **args)
    return Trainer(model=model, args=targs, train_dataset=PatternData(4000, 1),
                   eval_dataset=PatternData(32, 2), optimizers=(opt, sched), callbacks=[callback])


class TestHFCallback:
    def test_blowup_alerts_at_daemon_and_stops_training(self, tmp_path):
        """LR x1000 at step 220: wtwind fires, the alert comes back, the Trainer stops early."""
        with InProcessDaemon() as d:
            cb = WTwinCallback(run="hf-blowup", endpoint=d.endpoint, stop_on="warning",
                               stop_kinds=LOSS_KINDS)
            trainer = make_trainer(tmp_path, cb, eval_strategy="steps", eval_steps=100,
                                   save_strategy="steps", save_steps=100,
                                   include_num_input_tokens_seen=True)
            trainer.train()
            steps = trainer.state.global_step
            run = d.server.table.get("hf-blowup")
            tokens = [t for t in run.series.train.columns()["tokens"] if t is not None]
            wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
            received = dict(d.server.stats.received)
            daemon_alerts = d.firing("hf-blowup")
        loss_alerts = [a for a in daemon_alerts if a.kind in LOSS_KINDS]
        assert loss_alerts and loss_alerts[0].step > BLOWUP_AT
        assert cb.stop_alert is not None and cb.stop_alert["source"] == "daemon"
        assert cb.stop_alert["step"] > BLOWUP_AT
        assert steps < MAX_STEPS, "training did not stop on the alert"
        assert run.status == "stopped"   # by the callback, on the alert
        assert received["loss"] == steps          # one per logged step, no train_loss summary
        assert received["eval"] == 2 and received["checkpoint"] == 2
        assert run.last_eval.get("val_loss") is not None
        assert run.config["framework"] == "transformers" and run.config["max_steps"] == MAX_STEPS
        assert tokens[0] == 8 * 24 and tokens[-1] == trainer.state.num_input_tokens_seen  # by tokens

    def test_what_on_log_logs_besides_the_loss_is_sent_as_scalars(self, tmp_path):
        """``epoch`` (and any other number HF logs) becomes a scalar series at the daemon;
        the loss, lr and grad norm are not sent twice; eval metrics stay eval events."""
        with InProcessDaemon() as d:
            cb = WTwinCallback(run="hf-scalars", endpoint=d.endpoint)
            trainer = make_trainer(tmp_path, cb, max_steps=30, blowup_at=None,
                                   eval_strategy="steps", eval_steps=20)
            trainer.train()
            run = d.server.table.get("hf-scalars")
            wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
            scalars = run.scalars.columns()
        assert "epoch" in scalars and not {"loss", "learning_rate", "grad_norm"} & set(scalars)
        assert not any(k.startswith("eval_") for k in scalars)
        epochs = scalars["epoch"]
        assert epochs["step"][0] == 1 and epochs["step"][-1] == 30
        assert epochs["value"][-1] == pytest.approx(trainer.state.epoch, rel=1e-6)

    def test_clean_run_embedded_no_alert_no_stop(self, tmp_path):
        """No daemon configured: the monitor runs in-process and a clean run finishes silently."""
        cb = WTwinCallback(stop_on="warning")
        trainer = make_trainer(tmp_path, cb, max_steps=150, blowup_at=None)
        trainer.train()
        assert cb.tracker.mode == "embedded"
        assert trainer.state.global_step == 150
        assert [a for a in cb.alerts if a["severity"] != "info"] == []
        assert cb.tracker.last_state.step == 150


class PoisonAt(transformers.TrainerCallback):
    """Sets one weight to NaN just before optimizer step ``step``: that step's loss is NaN."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step - 1:
            with torch.no_grad():
                model.transformer.ln_f.weight[0] = float("nan")


class TestRawLoss:
    POISON, STEPS = 37, 60

    def _train(self, tmp_path, d, run: str, nan_filter=True, accumulate=1, **cb_kwargs):
        cb = WTwinCallback(run=run, endpoint=d.endpoint, stop_on="critical", **cb_kwargs)
        trainer = make_trainer(tmp_path, cb, max_steps=self.STEPS, blowup_at=None,
                               logging_steps=10, logging_nan_inf_filter=nan_filter,
                               gradient_accumulation_steps=accumulate)
        trainer.add_callback(PoisonAt(self.POISON))
        trainer.train()
        wait_for(lambda: d.server.table.get(run) and d.server.table.get(run).status != "running",
                 10, what="run_end at the daemon")
        return cb, trainer

    @pytest.mark.parametrize("nan_filter, accumulate", [(True, 1), (False, 2)])
    def test_nan_pages_at_its_step_despite_the_nan_filter(self, tmp_path, nan_filter, accumulate):
        """logging_steps=10, with the default NaN filter (or without it, and 2 micro-batches a
        step): the NaN of step 37 pages as step 37, not at the next log (40) or never."""
        with InProcessDaemon() as d:
            cb, trainer = self._train(tmp_path, d, "hf-nan", nan_filter, accumulate)
            nonfinite = [a for a in d.firing("hf-nan", ("critical",)) if a.kind == "nonfinite"]
        assert nonfinite and nonfinite[0].step == self.POISON
        assert cb.stop_alert is not None and cb.stop_alert["step"] == self.POISON
        assert trainer.state.global_step < self.STEPS, "training did not stop on the NaN"

    def test_the_gate_fails_the_run_the_callback_stopped(self, tmp_path):
        """Stopped at the NaN of step 37: the saved trainer_state.json holds no NaN, but the
        callback's log_history entry and OUTPUT_DIR/wtwin_stop.json each make
        `wtwin monitor trainer_state.json --fail-on critical` exit 1."""
        import json
        import subprocess
        import sys

        with InProcessDaemon() as d:
            cb, trainer = self._train(tmp_path, d, "hf-nan-gate")
        trainer.save_state()   # what a user's script does after train(): OUTPUT_DIR/trainer_state.json
        out = tmp_path / "out"
        state = json.loads((out / "trainer_state.json").read_text())
        losses = [r["loss"] for r in state["log_history"] if "loss" in r]
        assert losses and all(x == x and abs(x) != float("inf") for x in losses)  # no NaN logged
        (entry,) = [r["wtwin_stopped"] for r in state["log_history"] if "wtwin_stopped" in r]
        assert entry["kind"] == "nonfinite" and entry["severity"] == "critical" and entry["step"] == self.POISON
        beside = json.loads((out / "wtwin_stop.json").read_text())["wtwin_stopped"]
        assert beside == entry

        def gate(path):
            return subprocess.run([sys.executable, "-m", "wtwin.offline.cli", "monitor", str(path),
                                   "--fail-on", "critical"], capture_output=True, text=True, timeout=120)
        r = gate(out / "trainer_state.json")
        assert r.returncode == 1 and "stopped at step" in r.stdout, r.stdout + r.stderr
        (out / "wtwin_stop.json").unlink()      # the log_history entry alone
        assert gate(out / "trainer_state.json").returncode == 1
        state["log_history"] = [r for r in state["log_history"] if "wtwin_stopped" not in r]
        (out / "trainer_state.json").write_text(json.dumps(state))
        assert gate(out / "trainer_state.json").returncode == 0   # neither: the old blind spot
        (out / "wtwin_stop.json").write_text(json.dumps({"wtwin_stopped": entry}))
        assert gate(out / "trainer_state.json").returncode == 1   # the file alone

    def test_without_the_raw_loss_the_grad_norm_still_tells(self, tmp_path):
        """With the hook off, the filtered logs show no non-finite loss, only ``loss: 0.0``
        with ``grad_norm: nan``: that pages critical at a logged step, within two logs."""
        with InProcessDaemon() as d:
            cb, trainer = self._train(tmp_path, d, "hf-nan-hidden", raw_loss=False)
            nonfinite = [a for a in d.firing("hf-nan-hidden", ("critical",)) if a.kind == "nonfinite"]
        assert nonfinite and self.POISON < nonfinite[0].step <= self.POISON + 20
        assert cb.stop_alert is not None and trainer.state.global_step < self.STEPS


class Kick(transformers.TrainerCallback):
    """What a bad batch does to the weights, at the ``batch``-th batch the Trainer takes."""

    def __init__(self, batch: int, sigma: float) -> None:
        self.at = KickAt(batch, sigma)

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.at(model.parameters())


class TestRewind:
    STEPS = 520

    def test_a_kicked_run_rewinds_to_a_saved_folder_and_finishes(self, tmp_path):
        """A kick at batch 300 -> critical divergence -> the folder of step 200 is loaded,
        lr halved; training goes on to max_steps, the divergence resolves before the run
        ends, and no further critical alert fires."""
        from wtwin.emitters.actions import Rewind

        rewind = Rewind(lr_scale=0.5)
        with InProcessDaemon() as d:
            cb = WTwinCallback(run="hf-rewind", endpoint=d.endpoint, rewind=rewind)
            trainer = make_trainer(tmp_path, cb, max_steps=self.STEPS, blowup_at=None,
                                   save_strategy="steps", save_steps=50)
            trainer.add_callback(Kick(300, 1.0))
            trainer.train()
            alerts, audit, state = run_result(d, "hf-rewind")
        assert len(rewind.done) == 1, (alerts, rewind.refused)
        plan = rewind.done[0]
        assert plan.to_step == 200 and plan.alert["kind"] in ("divergence", "spike")
        assert trainer.state.global_step == self.STEPS and cb.stop_alert is None
        assert audit and audit[0]["checkpoint"] == "checkpoint-200"
        crit = [a for a in alerts if a[1] == "critical" and a[2] == "firing"]
        assert len(crit) == 1
        assert [a[3] < self.STEPS for a in alerts if a[0] == "divergence" and a[2] == "resolved"] == [True]
        assert state.band_lo <= state.l_obs <= state.band_hi


class TestKind:
    def test_a_pretrained_model_is_a_finetuning_run_unless_a_preset_is_named(self):
        """No preset: a model whose config names where its weights came from is sent as a
        fine-tune (kind "finetuning"), one built from a config as pretraining."""
        import transformers

        from wtwin.emitters.hf import WTwinCallback

        class Args:
            learning_rate, per_device_train_batch_size, gradient_accumulation_steps = 1e-3, 2, 1
            world_size, lr_scheduler_type, output_dir = 1, "linear", None

        class State:
            max_steps, is_world_process_zero = 10, True

        def preset(name_or_path, **kw):
            config = transformers.GPT2Config(n_layer=1, n_head=1, n_embd=8, vocab_size=16)
            model = transformers.GPT2LMHeadModel(config)
            model.config._name_or_path = name_or_path
            cb = WTwinCallback(embedded=True, raw_loss=False, **kw)
            cb.on_train_begin(Args(), State(), None, model=model)
            return cb.tracker.preset
        assert preset("gpt2") == "finetuning"
        assert preset("") == "pretraining"
        assert preset("gpt2", preset="pretraining") == "pretraining"

        class GRPOConfig(Args):     # TRL's online RL trainer's arguments, by their name
            pass

        Args = GRPOConfig   # noqa: N806
        assert preset("gpt2") == "stationary"
        assert preset("gpt2", preset="finetuning") == "finetuning"


class TestSecretOutsideOutputDir:
    """push_to_hub uploads output_dir: the run secret never stays there (issue 23, 24)."""

    class Args:
        learning_rate, per_device_train_batch_size, gradient_accumulation_steps = 1e-3, 2, 1
        world_size, output_dir = 1, None

        @property
        def lr_scheduler_type(self):
            return transformers.SchedulerType.LINEAR

    class State:
        max_steps, is_world_process_zero = 10, True

    def test_secret_in_state_dir_and_an_old_one_moved_out(self, tmp_path, monkeypatch):
        """A secret an older version wrote into output_dir moves to $XDG_STATE_HOME/wtwin/runs;
        a run connecting to a daemon writes none there; the config carries the scheduler's value."""
        from wtwin.emitters import run_secret

        monkeypatch.delenv("WTWIN_SECRET_DIR", raising=False)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        out = tmp_path / "out"
        out.mkdir()
        run_secret.secret_path("old", out).write_text("kept\n")
        args = self.Args()
        args.output_dir = str(out)
        with InProcessDaemon() as d:
            for run in ("old", "new"):
                cb = WTwinCallback(run=run, endpoint=d.endpoint, raw_loss=False)
                cb.on_train_begin(args, self.State(), None, model=None)
                cb.tracker.loss(1, 2.0)
                cb.tracker.close("completed")
            wait_for(lambda: d.server.table.get("new") is not None, what="the run at the daemon")
            config = d.server.table.get("new").config
        assert list(out.iterdir()) == []
        home = tmp_path / "state" / "wtwin" / "runs"
        assert (home / "old.wtwin-secret").read_text() == "kept\n"
        assert (home / "new.wtwin-secret").stat().st_mode & 0o777 == 0o600
        assert config["lr_scheduler_type"] == "linear"
