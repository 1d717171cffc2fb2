"""`wtwin monitor` on the files users already have: W&B and TensorBoard CSV exports,
Lightning's CSVLogger metrics.csv and TensorBoard event files, each with every train point.

The tfevents and metrics.csv files are written by the real libraries (torch's
SummaryWriter, a real Lightning Trainer with its CSVLogger); the two CSV exports come
from web UIs, so they are written here in the exact shape those UIs export.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from test_offline_cli import wtwin
from wtwin.offline.logs import LogError, read_log

N, ONSET = 6000, 4000


def curve(t: int, rng: random.Random, drift: bool = True) -> float:
    d = 3e-4 * (t - ONSET) if drift and t > ONSET else 0.0
    return 2.6 + 9 * t ** -0.35 + rng.gauss(0, 0.05) + d


def caught(path, *args) -> dict:
    r = wtwin("monitor", str(path), "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class TestWandbChartExport:
    def write(self, path, runs=("my-run",)):
        rng = random.Random(0)
        head = ['"Step"'] + [f'"{r} - train/loss","{r} - train/loss__MIN","{r} - train/loss__MAX"' for r in runs]
        rows = [",".join(head)]
        for t in range(1, N + 1):
            vals = []
            for i, _ in enumerate(runs):
                v = curve(t, rng, drift=i == 0)
                vals.append(f"{v},{v},{v}")
            rows.append(f"{t}," + ",".join(vals))
        path.write_text("\n".join(rows) + "\n")

    def test_every_point_read_and_the_drift_caught(self, tmp_path):
        p = tmp_path / "wandb_export.csv"
        self.write(p)
        log = read_log(p)
        assert log.n_loss == N and log.loss_col == "train/loss"
        doc = caught(p)
        assert doc["steps"] == N and ONSET < doc["first_alert_step"] < ONSET + 1500

    def test_loss_col_picks_the_run(self, tmp_path):
        """Two runs in one chart export: the first by default, another by --loss-col."""
        p = tmp_path / "two_runs.csv"
        self.write(p, runs=("drifting", "clean"))
        assert caught(p)["first_alert_step"] is not None
        assert caught(p, "--loss-col", "clean - train/loss")["first_alert_step"] is None


class TestTensorBoardCsvExport:
    def test_value_column_is_the_loss(self, tmp_path):
        rng = random.Random(1)
        p = tmp_path / "run-train-tag-loss.csv"
        p.write_text("Wall time,Step,Value\n" + "".join(
            f"{1.7e9 + t * 0.5},{t},{curve(t, rng)}\n" for t in range(1, N + 1)))
        assert read_log(p).n_loss == N
        doc = caught(p)
        assert doc["steps"] == N and ONSET < doc["first_alert_step"] < ONSET + 1500


class TestTfevents:
    @pytest.fixture
    def logdir(self, tmp_path):
        SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
        rng = random.Random(2)
        w = SummaryWriter(str(tmp_path / "tb"))
        for t in range(1, N + 1):
            w.add_scalar("Loss/train", curve(t, rng), t)
            w.add_scalar("train/lr", 3e-4, t)
            w.add_scalar("train/grad_norm", 1.0 if t < N - 5 else float("nan"), t)
            if t % 500 == 0:
                w.add_scalar("Loss/val", 2.9, t)
        w.close()
        return tmp_path / "tb"

    def test_folder_and_file_by_the_usual_names(self, logdir):
        (event_file,) = logdir.glob("*tfevents*")
        for path in (logdir, event_file):
            log = read_log(path)
            assert log.n_loss == N and log.n_val == N // 500
            assert log.meta["tfevents_tags"] == {"loss": "Loss/train", "val_loss": "Loss/val", "lr": "train/lr",
                                                 "grad_norm": "train/grad_norm"}
            grads = [e[4] for e in log.events(with_grad=True) if e[0] == "loss"]
            assert grads[0] == 1.0 and math.isnan(grads[-1])
        doc = caught(logdir)
        assert doc["steps"] == N and ONSET < doc["first_alert_step"] < ONSET + 1500

    def test_loss_col_names_the_tag(self, logdir):
        log = read_log(logdir, loss_col="Loss/val")
        assert log.n_loss == N // 500
        with pytest.raises(LogError, match="no scalar tag named 'nope'.*Loss/train"):
            read_log(logdir, loss_col="nope")
        r = wtwin("monitor", str(logdir), "--loss-col", "nope")
        assert r.returncode == 2 and "Traceback" not in r.stderr and "Loss/train" in r.stderr

    def test_a_logdir_of_one_run_below_and_of_several(self, logdir, tmp_path):
        """lightning_logs/version_0/events...: found below the folder given; two runs
        below it: one sentence naming them."""
        nested = tmp_path / "lightning_logs"
        (nested / "version_0").mkdir(parents=True)
        for f in logdir.iterdir():
            (nested / "version_0" / f.name).write_bytes(f.read_bytes())
        assert read_log(nested).n_loss == N
        (nested / "version_1").mkdir()
        for f in logdir.iterdir():
            (nested / "version_1" / f.name).write_bytes(f.read_bytes())
        with pytest.raises(LogError, match="a logdir of 2 runs .version_0, version_1.; name one with --run"):
            read_log(nested)

    def test_a_logdir_of_several_runs_reads_the_one_named(self, logdir, tmp_path):
        """TensorBoard's layout, logdir/<run>/events...: --run picks one by its name, the CLI
        too; an unknown name lists the runs that are there."""
        root = tmp_path / "runs"
        for name in ("lr-3e-4", "lr-1e-3/seed1"):
            (root / name).mkdir(parents=True)
            for f in logdir.iterdir():
                (root / name / f.name).write_bytes(f.read_bytes())
        assert read_log(root, run="lr-1e-3/seed1").n_loss == N
        with pytest.raises(LogError, match="no run named 'nope'; the runs here are: lr-1e-3/seed1, lr-3e-4"):
            read_log(root, run="nope")
        r = wtwin("monitor", str(root), "--run", "lr-3e-4", "--json")
        assert r.returncode == 0, r.stderr
        r = wtwin("monitor", str(root))
        assert r.returncode == 2 and "--run lr-1e-3/seed1" in r.stderr and "Traceback" not in r.stderr

    def test_a_broken_event_file_is_one_sentence(self, tmp_path):
        p = tmp_path / "events.out.tfevents.123.host"
        p.write_bytes(b"\x00\x01garbage" * 10)
        r = wtwin("monitor", str(p))
        assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("wtwin: ")


class TestLightningCsvLogger:
    def test_every_train_step_point_is_read(self, tmp_path):
        """A real Trainer logging train_loss (on_step and on_epoch) and val_loss through its
        CSVLogger: metrics.csv has train_loss_step, train_loss_epoch, val_loss; every step's
        train_loss_step is a loss point, val_loss the eval stream."""
        torch = pytest.importorskip("torch")
        L = pytest.importorskip("lightning.pytorch")
        CSVLogger = pytest.importorskip("lightning.pytorch.loggers").CSVLogger

        class Tiny(L.LightningModule):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.net = torch.nn.Linear(8, 1)

            def training_step(self, batch, _):
                loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
                self.log("train_loss", loss, on_step=True, on_epoch=True)
                return loss

            def validation_step(self, batch, _):
                self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.05)

        g = torch.Generator().manual_seed(0)
        x = torch.randn(320, 8, generator=g)
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        loader = torch.utils.data.DataLoader(data, batch_size=16)
        trainer = L.Trainer(max_epochs=5, accelerator="cpu", devices=1, log_every_n_steps=1,
                            logger=CSVLogger(str(tmp_path)), enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False,
                            num_sanity_val_steps=0)
        trainer.fit(Tiny(), loader, loader)
        (metrics,) = tmp_path.rglob("metrics.csv")
        header = metrics.read_text().splitlines()[0].split(",")
        assert {"train_loss_step", "train_loss_epoch", "val_loss"} <= set(header)
        log = read_log(metrics)
        assert log.loss_col == "train_loss_step" and log.n_loss == 5 * 20 and log.n_val == 5
        doc = caught(metrics)
        assert doc["steps"] == 100


class TestPlainCsvUnchanged:
    def test_a_dash_in_a_plain_csv_column_is_not_an_export(self, tmp_path):
        """Only a file of Step and "<run> - <metric>" columns is read as a W&B export."""
        p = tmp_path / "plain.csv"
        p.write_text("step,loss,lr - schedule\n1,2.0,0.1\n2,1.9,0.1\n")
        log = read_log(p)
        assert log.loss_col == "loss" and log.n_loss == 2
