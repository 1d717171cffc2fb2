"""Small real training runs against a live wtwind, as a user would meet it: a healthy MLP
on scikit-learn's digits stays silent on six seeds; the same run with its LR x100 from
step 800 pages, the alert reaches the trainer and stays firing; a NaN pages critical at
its step and is still firing after the run ends. `TestOwnRunsGoals` (slow): issue 22's own
runs, the cases of tests/live_runs.py."""

import json
import math

import pytest

import live_runs
from helpers import http_get, wait_for

from wtwin.emitters import connect

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")


def train(emit, seed, steps=1400, blowup_at=None, nan_at=None, frozen_at=None):
    from sklearn.datasets import load_digits

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    X, y = load_digits(return_X_y=True)
    X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    for step in range(1, steps + 1):
        lr = 0.05 * (100 if blowup_at and step >= blowup_at else 1)
        for group in opt.param_groups:
            group["lr"] = lr
        if not (frozen_at and step > frozen_at):   # a frozen loader: the same batch again
            idx = torch.randint(0, len(X), (32,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = float("nan") if nan_at and step >= nan_at else loss.item()
        emit.loss(step, value, lr=lr)
        if not math.isfinite(value):
            break
    return step


def run_page(daemon, run, last):
    def page():
        status, body = http_get(f"{daemon.url}/api/runs/{run}")
        doc = json.loads(body) if status == 200 else {}
        return doc if doc.get("step") == last else None
    return wait_for(page, timeout=60, what=f"{run} at step {last}")


def pages(doc):
    return [(m["step"], m["kind"], m["severity"]) for m in doc["markers"]
            if m["status"] == "firing" and m["severity"] != "info"]


class TestDigitsMLP:
    @pytest.mark.slow  # 82 s over its parameters on 2 busy cores (make test-all, CI)
    @pytest.mark.parametrize("seed", range(6))
    def test_healthy_run_pages_nothing(self, daemon, seed):
        got = []
        with connect(daemon.ipc, run=f"digits-{seed}", on_alert=got.append) as emit:
            last = train(emit, seed)
        assert pages(run_page(daemon, f"digits-{seed}", last)) == []
        assert [a for a in got if a["severity"] != "info"] == []

    def test_lr_x100_pages_and_reaches_the_trainer(self, daemon):
        got = []
        with connect(daemon.ipc, run="digits-blowup", on_alert=got.append) as emit:
            last = train(emit, 0, blowup_at=800)
            wait_for(lambda: emit.poll() or any(a["severity"] != "info" for a in got),
                     timeout=30, what="the alert back at the trainer")
        paged = pages(run_page(daemon, "digits-blowup", last))
        assert paged and all(step >= 800 for step, _, _ in paged), paged
        assert any(a["status"] == "firing" and a["severity"] != "info" and a["step"] >= 800 for a in got)

    def test_a_frozen_data_loader_pages_within_50_steps_and_stays_firing(self, daemon):
        """The same batch from step 700 on: a critical frozen_loader page by step 750, still firing at
        the run's last step."""
        with connect(daemon.ipc, run="digits-frozen") as emit:
            last = train(emit, 2, frozen_at=700)
        doc = run_page(daemon, "digits-frozen", last)
        paged = pages(doc)
        assert paged and paged[0][1:] == ("frozen_loader", "critical") and 700 < paged[0][0] <= 750, paged
        assert [m for m in doc["markers"] if m["kind"] == "frozen_loader" and m["status"] == "resolved"] == []

    def test_nan_is_critical_at_its_step_and_stays_firing_after_the_run(self, daemon):
        with connect(daemon.ipc, run="digits-nan") as emit:
            last = train(emit, 1, nan_at=600)
        assert last == 600
        doc = run_page(daemon, "digits-nan", 600)
        assert (600, "nonfinite", "critical") in pages(doc)
        resolved = [m for m in doc["markers"] if m["kind"] == "nonfinite" and m["status"] == "resolved"]
        assert resolved == []


@pytest.mark.slow   # 20 real training runs of 3,000 steps: 7 minutes on a loaded 2-core VM
class TestOwnRunsGoals:
    """Issue 22's own runs (tests/live_runs.py, whose ``--table`` prints the same cases):
    healthy MLPs and CNNs on five seeds stay silent; LR x100, a NaN weight, shuffled labels
    and a frozen data loader page within 50 steps and stay firing to run end (and after
    it: none recovers); a recovered blow-up resolves. The page reaches the trainer."""

    @pytest.mark.parametrize("case", [
        pytest.param(c, id=c.name) for c in live_runs.CASES])
    def test_meets_the_goal(self, daemon, case):
        o = live_runs.run_live(daemon, case)
        assert live_runs.verdict(o) == "ok", live_runs.table([o], live=True)
        if case.fault != "healthy":
            assert any(m[3] == "firing" and m[2] != "info" for m in o.trainer), o.trainer
