"""Lightning Trainer + WTwinCallback against a real wtwind: a tiny model on CPU, LR blow-up part-way."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

from _integrations import InProcessDaemon, KickAt, one_torch_thread, run_result, wait_for  # noqa: E402,F401
from wtwin.emitters.lightning import WTwinCallback  # noqa: E402

MAX_STEPS, BLOWUP_AT = 400, 220
LOSS_KINDS = ("drift", "spike", "divergence", "nonfinite", "plateau")


def _data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    y = torch.sin(x[:, :1] * 2) + x[:, 1:2] ** 2 * 0.5 + 0.05 * torch.randn(n, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32,
                                       shuffle=False)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TinyNet(L.LightningModule):
    def __init__(self, blowup_at: int | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
        self.blowup_at = blowup_at

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=3e-3)
        at = self.blowup_at
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 if at is None or s < at else 3000.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _trainer(tmp_path, cb, max_steps=MAX_STEPS):
    ckpt = L.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=100,
                                       save_top_k=-1)
    return L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     val_check_interval=100, limit_val_batches=2, num_sanity_val_steps=0,
                     callbacks=[cb, ckpt], default_root_dir=str(tmp_path))


class TestLightningCallback:
    def test_blowup_alerts_at_daemon_and_stops_training(self, tmp_path):
        """LR x3000 at step 220: wtwind fires, the callback sees it and sets trainer.should_stop."""
        with InProcessDaemon() as d:
            cb = WTwinCallback(run="pl-blowup", endpoint=d.endpoint, log_every=5,
                               stop_on="warning", stop_kinds=LOSS_KINDS)
            trainer = _trainer(tmp_path, cb)
            trainer.fit(TinyNet(BLOWUP_AT), _data(20000, 1), _data(64, 2))
            run = d.server.table.get("pl-blowup")
            wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
            received = dict(d.server.stats.received)
            alerts = [a for a in d.firing("pl-blowup") if a.kind in LOSS_KINDS]
        assert alerts and alerts[0].step > BLOWUP_AT
        assert cb.stop_alert is not None and cb.stop_alert["source"] == "daemon"
        assert trainer.global_step < MAX_STEPS, "training did not stop on the alert"
        assert run.status == "stopped"   # by the callback, on the alert
        assert received["loss"] == trainer.global_step   # one per optimizer step, buffered
        assert received["eval"] >= 2 and received["checkpoint"] >= 2
        assert "val_loss" in run.last_eval and run.config["framework"] == "lightning"

    def test_a_stopped_run_leaves_its_alert_beside_metrics_csv_for_the_gate(self, tmp_path):
        """Stopped on the blow-up: wtwin_stop.json in trainer.log_dir, beside the CSVLogger's
        metrics.csv, holds the alert; `wtwin monitor metrics.csv --json` reports the stop
        and --fail-on at its severity exits 1."""
        import json
        import subprocess
        import sys

        with InProcessDaemon() as d:
            cb = WTwinCallback(run="pl-stop-gate", endpoint=d.endpoint, log_every=5,
                               stop_on="warning", stop_kinds=LOSS_KINDS)
            trainer = L.Trainer(max_steps=MAX_STEPS, accelerator="cpu", devices=1, log_every_n_steps=1,
                                logger=L.loggers.CSVLogger(str(tmp_path), name="csv"),
                                enable_progress_bar=False, enable_model_summary=False,
                                limit_val_batches=0, enable_checkpointing=False, callbacks=[cb])
            trainer.fit(LoggedNet(BLOWUP_AT), _data(20000, 1))
        assert cb.stop_alert is not None and trainer.global_step < MAX_STEPS
        (metrics,) = tmp_path.glob("csv/*/metrics.csv")
        rec = json.loads((metrics.parent / "wtwin_stop.json").read_text())["wtwin_stopped"]
        assert rec["kind"] == cb.stop_alert["kind"] and rec["step"] == cb.stop_alert["step"]
        assert rec["stopped_at_step"] == trainer.global_step and rec["run"] == "pl-stop-gate"
        cmd = [sys.executable, "-m", "wtwin.offline.cli", "monitor", str(metrics)]
        doc = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120).stdout)
        assert [(a["kind"], a["step"]) for a in doc["stopped"]] == [(rec["kind"], rec["step"])]
        r = subprocess.run(cmd + ["--fail-on", rec["severity"]], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr

    def test_clean_run_embedded_and_state_in_checkpoint(self, tmp_path):
        """No daemon: the in-process monitor stays silent on a clean run; its state rides in the .ckpt."""
        cb = WTwinCallback(log_every=10)
        trainer = _trainer(tmp_path, cb, max_steps=200)
        trainer.fit(TinyNet(None), _data(8000, 1), _data(64, 2))
        assert cb.tracker.mode == "embedded" and trainer.global_step == 200
        assert [a for a in cb.alerts if a["severity"] != "info"] == []
        assert cb.tracker.last_state.step == 199   # steps 0..199, as Lightning logs them
        ckpt = torch.load(tmp_path / "ckpt" / "epoch=0-step=200.ckpt", weights_only=False)
        saved = next(v for k, v in ckpt["callbacks"].items() if "WTwinCallback" in k)
        assert saved["tracker"]["monitor"] is not None and saved["last_step"] >= 190


class Kick(L.Callback):
    """What a bad batch does to the weights, at the ``batch``-th batch (data position)."""

    def __init__(self, batch: int, sigma: float) -> None:
        self.at = KickAt(batch, sigma)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.at(pl_module.parameters())


class TestRewind:
    STEPS = 520

    def test_a_kicked_run_rewinds_to_a_saved_checkpoint_and_finishes(self, tmp_path):
        """A kick at batch 300 -> critical divergence -> the .ckpt of step 200 is loaded;
        training goes on to max_steps and no further critical alert fires."""
        from wtwin.emitters.actions import Rewind

        rewind = Rewind(lr_scale=0.5)
        with InProcessDaemon() as d:
            cb = WTwinCallback(run="pl-rewind", endpoint=d.endpoint, log_every=5, rewind=rewind)
            ckpt = L.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=50,
                                               save_top_k=-1)
            trainer = L.Trainer(max_steps=self.STEPS, accelerator="cpu", devices=1, logger=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                limit_val_batches=0, callbacks=[cb, ckpt, Kick(300, 0.5)],
                                default_root_dir=str(tmp_path))
            trainer.fit(TinyNet(None), _data(40000, 1))
            alerts, audit, state = run_result(d, "pl-rewind")
        assert len(rewind.done) == 1, (alerts, rewind.refused)
        plan = rewind.done[0]
        assert plan.to_step == 200 and plan.alert["kind"] in ("divergence", "spike")
        assert trainer.global_step == self.STEPS and cb.stop_alert is None
        assert audit and audit[0]["checkpoint"] == "epoch=0-step=200.ckpt"
        assert len([a for a in alerts if a[1] == "critical" and a[2] == "firing"]) == 1
        assert state.band_lo <= state.l_obs <= state.band_hi


class LoggedNet(TinyNet):
    """TinyNet that logs its loss and Lightning's own total gradient norm."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer):
        from lightning.pytorch.utilities import grad_norm

        self.log("grad_total", grad_norm(self, norm_type=2)["grad_2.0_norm_total"])


class TestStepsMatchLightningsLogger:
    @pytest.mark.parametrize("accumulate", [1, 3])
    def test_steps_losses_and_grad_norms_equal_metrics_csv(self, tmp_path, accumulate):
        """Every (step, loss, grad norm) the daemon received is the row Lightning's CSVLogger
        wrote for that step, with gradient accumulation too (issue 23)."""
        import csv

        with InProcessDaemon() as d:
            cb = WTwinCallback(run=f"pl-steps-{accumulate}", endpoint=d.endpoint, log_every=7)
            trainer = L.Trainer(max_steps=40, accelerator="cpu", devices=1, log_every_n_steps=1,
                                logger=L.loggers.CSVLogger(str(tmp_path), name="csv"),
                                accumulate_grad_batches=accumulate, enable_progress_bar=False,
                                enable_model_summary=False, limit_val_batches=0,
                                enable_checkpointing=False, callbacks=[cb])
            trainer.fit(LoggedNet(None), _data(4000, 1))
            run = d.server.table.get(f"pl-steps-{accumulate}")
            wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
            cols = run.series.train.columns()
        rows = list(csv.DictReader(open(next(tmp_path.glob("csv/*/metrics.csv")))))
        logged = {int(r["step"]): r for r in rows if r.get("train_loss")}
        norms = {int(r["step"]): float(r["grad_total"]) for r in rows if r.get("grad_total")}
        sent = list(zip(cols["step"], cols["loss"], cols["grad_norm"]))
        assert [int(s) for s, _, _ in sent] == sorted(logged) and len(sent) == 40
        for step, loss, gnorm in sent:
            assert loss == pytest.approx(float(logged[int(step)]["train_loss"]), rel=1e-5)
            assert gnorm == pytest.approx(norms[int(step)], rel=1e-4)


class TestScalars:
    def test_what_self_log_logs_is_sent_as_scalars_at_each_flush(self, tmp_path):
        """``grad_total`` (logged by the module) reaches the daemon as a scalar at each flush
        of the loss buffer, its value the one metrics.csv has at that step; the loss the
        callback sends is not sent again, validation's goes as eval."""
        import csv

        with InProcessDaemon() as d:
            cb = WTwinCallback(run="pl-scalars", endpoint=d.endpoint, log_every=7)
            trainer = L.Trainer(max_steps=40, accelerator="cpu", devices=1, log_every_n_steps=1,
                                logger=L.loggers.CSVLogger(str(tmp_path), name="csv"),
                                enable_progress_bar=False, enable_model_summary=False,
                                limit_val_batches=0, enable_checkpointing=False, callbacks=[cb])
            trainer.fit(LoggedNet(None), _data(4000, 1))
            run = d.server.table.get("pl-scalars")
            wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
            scalars = run.scalars.columns()
        rows = list(csv.DictReader(open(next(tmp_path.glob("csv/*/metrics.csv")))))
        norms = {int(r["step"]): float(r["grad_total"]) for r in rows if r.get("grad_total")}
        assert set(scalars) == {"grad_total"}
        got = scalars["grad_total"]
        assert got["step"] == [6.0, 13.0, 20.0, 27.0, 34.0]   # the 7th, 14th... loss: logger steps
        for step, val in zip(got["step"], got["value"]):
            assert val == pytest.approx(norms[int(step)], rel=1e-4)
