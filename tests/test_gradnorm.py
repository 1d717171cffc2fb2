"""The gradient norm is read where a log has it: a surge just before a loss page is named
in the page, and a surge alone never pages."""

import csv
import json
import random

from wtwin.offline.cli import main as cli
from wtwin.detect import RunMonitor
from wtwin.detect.gradnorm import GradNormDetector
from wtwin.detect.replay import alerts


def _run(n=4000, jump_at=None, surge_at=(), grad_scale=1.0, seed=0):
    """(step, loss, grad_norm) of a decaying run; a sustained loss jump at ``jump_at``."""
    rng = random.Random(seed)
    rows = []
    for t in range(1, n + 1):
        loss = 2.0 + 6.0 * t ** -0.4 + rng.gauss(0, 0.02)
        if jump_at is not None and t >= jump_at:
            loss += 1.5
        g = grad_scale * (1.0 + 0.1 * rng.random())
        if any(0 <= t - s < 3 for s in surge_at):
            g *= 20.0
        rows.append((t, loss, g))
    return rows


def _csv(path, rows, grad=True):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "grad_norm"] if grad else ["step", "loss"])
        for t, loss, g in rows:
            w.writerow([t, loss, g] if grad else [t, loss])
    return str(path)


def _monitor(path, capsys, *extra):
    assert cli(["monitor", path, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_surge_before_a_loss_page_is_named_in_it(tmp_path, capsys):
    rows = _run(jump_at=3000, surge_at=(2995,))
    res = _monitor(_csv(tmp_path / "jump.csv", rows), capsys)
    page = next(a for a in res["alerts"] if a["severity"] in ("warning", "critical"))
    assert page["step"] >= 3000
    assert "grad norm surged" in page["message"] and "at step 2995" in page["message"]
    without = _monitor(_csv(tmp_path / "nograd.csv", rows, grad=False), capsys)
    assert [(a["step"], a["kind"], a["severity"]) for a in without["alerts"]] == \
        [(a["step"], a["kind"], a["severity"]) for a in res["alerts"]]
    assert "grad norm" not in without["alerts"][0]["message"]


def test_surges_alone_never_page(tmp_path, capsys):
    rows = _run(surge_at=(800, 1600, 2400, 3200))
    res = _monitor(_csv(tmp_path / "clean.csv", rows), capsys, "--all")
    assert [a for a in res["alerts"] if a["severity"] != "info"] == []


def test_invariant_to_the_norms_scale():
    msgs = []
    for scale in (1.0, 1e-3, 1e3):
        rows = _run(jump_at=3000, surge_at=(2990,), grad_scale=scale)
        events = [("loss", t, loss, None, g) for t, loss, g in rows]
        page = next(a for a in alerts(events) if a.severity != "info")
        msgs.append(page.message)
    assert msgs[0] == msgs[1] == msgs[2] and "grad norm surged" in msgs[0]


def test_a_non_finite_norm_is_remembered_not_fed():
    det = GradNormDetector()
    for t in range(1, 60):
        det.update(t, 2.0)
    det.update(60, float("inf"))
    det.update(61, 0.0)
    assert det.update(62, 2.0).ratio == 1.0          # the level never saw inf or 0
    assert det.context(70, 50) == "grad norm was 0.0 at step 61"
    assert det.context(200, 50) == ""


def test_snapshot_restores_exactly():
    mon = RunMonitor()
    for t, loss, g in _run(n=1200, surge_at=(1100,)):
        mon.update_loss(t, loss, None, g)
    twin = RunMonitor()
    twin.restore(json.loads(json.dumps(mon.snapshot())))
    assert twin.detectors["gradnorm"].snapshot() == mon.detectors["gradnorm"].snapshot()
    assert twin.detectors["gradnorm"].context(1150, 200).startswith("grad norm surged")
