"""W&B logging of wtwin's scores and alerts, in WANDB_MODE=offline, read back from the run file."""

from __future__ import annotations

import glob
import json
import struct

import pytest

torch = pytest.importorskip("torch")
wandb = pytest.importorskip("wandb")

from _integrations import InProcessDaemon, wait_for, one_torch_thread  # noqa: E402,F401
from wtwin.emitters.optim import WTwinSGD  # noqa: E402
from wtwin.emitters.tracker import Tracker  # noqa: E402
from wtwin.emitters.wandb import WandbLogger  # noqa: E402


def _chunks(data: bytes, base: int):
    """(kind, payload) chunks of a LevelDB-style log whose 32 KiB blocks start at ``base``."""
    pos = 7
    while pos + 7 <= len(data):
        left = 32768 - (pos - base) % 32768
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        if kind not in (1, 2, 3, 4) or length > left - 7:
            raise ValueError(f"bad chunk header at {pos}")
        yield kind, data[pos + 7:pos + 7 + length]
        pos += 7 + length


def _records(path: str):
    """The protobuf records of an offline ``.wandb`` file.

    The file is a 7-byte ``:W&B`` header then a LevelDB-style log (32 KiB blocks, 7-byte
    chunk headers). Whether the blocks count the file header has changed between W&B
    versions, so both layouts are tried and the one that parses to the end is used.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    for base in (0, 7):
        try:
            chunks = list(_chunks(data, base))
        except ValueError:
            continue
        break
    else:
        raise AssertionError(f"{path}: cannot parse the run file")
    buf = b""
    for kind, payload in chunks:
        buf = payload if kind in (1, 2) else buf + payload
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def _read(run_dir) -> tuple[list[dict], list, bool]:
    path = glob.glob(f"{run_dir}/wandb/offline-run-*/run-*.wandb")[0]
    rows, alerts, ended = [], [], False
    for rec in _records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                         for i in rec.history.item})
        elif kind == "alert":
            alerts.append(rec.alert)
        ended |= kind == "exit"
    return rows, alerts, ended


def _finish() -> None:
    """Finish the run and stop the W&B service, so the run file is complete on disk."""
    wandb.finish()
    wandb.teardown()


def _history(run_dir) -> tuple[list[dict], list]:
    """History rows and native alerts, once the run file holds its exit record."""
    rows, alerts, _ = wait_for(lambda: (r := _read(run_dir))[2] and r, 15, 0.1,
                               what="the run's exit record in the offline file")
    return rows, alerts


@pytest.fixture
def offline_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="wtwin-test", dir=str(tmp_path))
    yield run
    if wandb.run is not None:
        wandb.finish()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class TestWandbLogger:
    @pytest.mark.slow  # 26 s on 2 busy cores (make test-all, CI)
    def test_embedded_scores_and_alerts_land_in_the_run(self, offline_run, tmp_path):
        """W, D, Q, forecast per step on the wtwin/step axis; the blow-up's alert as wtwin/alert/<kind>."""
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = WTwinSGD(model.parameters(), lr=1e-2, momentum=0.9, log_every=10,
                       wandb=WandbLogger(native_alerts=True))
        x = torch.randn(64, 4)
        y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]])
        for t in range(500):
            if t == 300:
                opt.param_groups[0]["lr"] = 5.0
            loss = torch.nn.functional.mse_loss(model(x), y + 0.01 * torch.randn(64, 1))
            opt.zero_grad()
            loss.backward()
            opt.step(loss=loss)
        opt.close()
        firing = [a for a in opt.wtwin_alerts if a["status"] == "firing" and a["severity"] != "info"]
        assert firing, "the blow-up raised no alert"
        _finish()
        rows, native = _history(tmp_path)
        scores = [r for r in rows if "wtwin/alerting" in r]
        assert len(scores) == 500 and scores[-1]["wtwin/step"] == 500
        assert all(r["wtwin/loss"] is not None for r in scores[:300])
        for key in ("wtwin/W", "wtwin/D", "wtwin/Q", "wtwin/forecast"):
            assert any(key in r for r in scores), key  # once the monitor is scoring
        alert_rows = [r for r in rows if f"wtwin/alert/{firing[0]['kind']}" in r]
        assert alert_rows and alert_rows[0][f"wtwin/alert/{firing[0]['kind']}"] == 1
        assert alert_rows[0]["wtwin/step"] == firing[0]["step"] > 300
        assert any(firing[0]["kind"] in a.title for a in native)

    def test_daemon_alert_is_logged(self, offline_run, tmp_path):
        """An alert coming back from wtwind is logged with its severity, W and step. (A
        critical alert stays firing when the run ends: one row, no resolve.)"""
        with InProcessDaemon() as d:
            logger = WandbLogger()
            tr = Tracker(endpoint=d.endpoint, run="wb-nan", wandb=logger)
            for t in range(1, 20):
                tr.loss(t, 2.0 - t * 0.01)
            tr.loss(20, float("nan"))
            def back():
                tr.poll()
                return [a for a in tr.alerts if a["kind"] == "nonfinite"]
            wait_for(back, 10, what="nonfinite alert back")
            tr.close()
        _finish()
        rows, _ = _history(tmp_path)
        hit = [r for r in rows if "wtwin/alert/nonfinite" in r]
        assert logger.logged == 1 and hit, rows
        assert hit[0]["wtwin/alert_severity"] == 2 and hit[0]["wtwin/step"] == 20

    def test_without_an_active_run_it_is_a_noop(self, monkeypatch):
        """No wandb.init: logging returns False and raises nothing."""
        if wandb.run is not None:
            wandb.finish()
        logger = WandbLogger()
        assert logger.log_alert({"kind": "spike", "status": "firing", "step": 3}) is False
        assert logger.logged == 0
