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


def _records(path: str):
    """The protobuf records of an offline ``.wandb`` file (LevelDB-style log, 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf, block = open(path, "rb").read(), 7, b"", 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf + chunk if kind == 4 else chunk)
            buf = b""
            yield rec
        else:
            buf = (buf if kind == 3 else b"") + chunk


def _history(run_dir) -> tuple[list[dict], list]:
    path = glob.glob(f"{run_dir}/wandb/offline-run-*/run-*.wandb")[0]
    rows, alerts = [], []
    for rec in _records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                         for i in rec.history.item})
        elif kind == "alert":
            alerts.append(rec.alert)
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
        wandb.finish()
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
        """An alert coming back from wtwind is logged with its severity, W and step."""
        with InProcessDaemon() as d:
            tr = Tracker(endpoint=d.endpoint, run="wb-nan", wandb=WandbLogger())
            for t in range(1, 20):
                tr.loss(t, 2.0 - t * 0.01)
            tr.loss(20, float("nan"))
            wait_for(lambda: tr.poll() or [a for a in tr.alerts if a["kind"] == "nonfinite"], 10,
                     what="nonfinite alert back")
            tr.close()
        wandb.finish()
        rows, _ = _history(tmp_path)
        hit = [r for r in rows if "wtwin/alert/nonfinite" in r]
        assert hit and hit[0]["wtwin/alert_severity"] == 2 and hit[0]["wtwin/step"] == 20

    def test_without_an_active_run_it_is_a_noop(self, monkeypatch):
        """No wandb.init: logging returns False and raises nothing."""
        if wandb.run is not None:
            wandb.finish()
        logger = WandbLogger()
        assert logger.log_alert({"kind": "spike", "status": "firing", "step": 3}) is False
        assert logger.logged == 0
