"""Obvious failures page critical, live and offline alike (issue 22, part 3): a loss of 0.0
under a NaN grad norm (a real Hugging Face Trainer's trainer_state.json), grad norms
non-finite in a row, a loss blown up by orders of magnitude in its first points."""

from __future__ import annotations

import json
import math

import pytest

from helpers import Daemon
from test_offline_cli import wtwin
from web_fed import multipart, post
from wtwin.detect import RunMonitor
from wtwin.detect.frozen_loader import FrozenLoaderDetector
from wtwin.detect.nonfinite import NonfiniteDetector
from wtwin.detect.replay import alerts

NAN = float("nan")
POISON, LAST = 150, 220


def _real_trainer_state(out) -> dict:
    """A tiny GPT-2 trained by transformers' Trainer (defaults: NaN filter on, logging every
    10 steps); one weight set to NaN before step 150. Its own trainer_state.json."""
    import torch
    import transformers
    from test_hf_callback import PatternData, tiny_gpt2

    class PoisonAt(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kw):
            if state.global_step == POISON - 1:
                with torch.no_grad():
                    model.transformer.ln_f.weight[0] = float("nan")

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        args = transformers.TrainingArguments(
            output_dir=str(out), max_steps=LAST, per_device_train_batch_size=8, report_to=[],
            use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0,
            logging_steps=10, save_strategy="no", learning_rate=3e-3)
        tr = transformers.Trainer(model=tiny_gpt2(), args=args, train_dataset=PatternData(4000, 1),
                                  callbacks=[PoisonAt()])
        tr.train()
    finally:
        torch.set_num_threads(threads)
    tr.state.save_to_json(str(out / "trainer_state.json"))
    return json.loads((out / "trainer_state.json").read_text())


def _faithful_trainer_state(out) -> dict:
    """The same file as transformers 5.25 writes it (without transformers installed)."""
    rows = [{"epoch": s / 500, "grad_norm": 0.8 if s < POISON else NAN,
             "learning_rate": 3e-3 * (1 - s / LAST),
             "loss": 3.4 * (s / 10) ** -0.45 if s < POISON + 10 else 0.0, "step": s}
            for s in range(10, LAST + 1, 10)]
    doc = {"global_step": LAST, "max_steps": LAST, "logging_steps": 10, "log_history": rows}
    (out / "trainer_state.json").write_text(json.dumps(doc, indent=2))   # NaN as json writes it
    return doc


@pytest.fixture(scope="module")
def trainer_state(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf-nan")
    try:
        import transformers  # noqa: F401
        doc = _real_trainer_state(out)
    except ImportError:
        doc = _faithful_trainer_state(out)
    return out / "trainer_state.json", doc


class TestHiddenNaN:
    def test_the_file_is_the_failure(self, trainer_state):
        """The Trainer logged loss 0.0 and grad_norm NaN from step 160 on (the case)."""
        _, doc = trainer_state
        rows = [r for r in doc["log_history"] if "loss" in r]
        late = [r for r in rows if r["step"] >= POISON + 10]
        assert late and all(r["loss"] == 0.0 and math.isnan(r["grad_norm"]) for r in late)
        assert all(math.isfinite(r["loss"]) for r in rows)

    def test_cli_gate_fails_on_it(self, trainer_state):
        """`wtwin monitor trainer_state.json --fail-on critical` exits 1, paging at step 160."""
        path, _ = trainer_state
        r = wtwin("monitor", str(path), "--fail-on", "critical", "--json")
        assert r.returncode == 1, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        crit = [a for a in doc["alerts"] if a["severity"] == "critical"]
        assert crit[0]["kind"] == "nonfinite" and crit[0]["step"] == POISON + 10
        assert "exactly 0.0" in crit[0]["message"]

    def test_analyze_pages_it(self, trainer_state, tmp_path):
        """/api/analyze of a real wtwind: a critical nonfinite, not "no alerts"."""
        path, _ = trainer_state
        with Daemon(tmpdir=str(tmp_path)) as d:
            body, ctype = multipart("trainer_state.json", path.read_bytes())
            status, p = post(d.url + "/api/analyze", body, ctype)
        assert status == 200, p
        assert p["alerts"]["critical"] >= 1 and p["columns"]["grad_norm"] == "grad_norm"
        assert any(t["kind"] == "nonfinite" and t["severity"] == "critical"
                   for t in p["transitions"])


def curve(n, start=1, scale=1.0):
    return [(t, scale * (2.0 + 8.0 * t ** -0.4 + 0.01 * math.sin(t))) for t in range(start, start + n)]


def pages(events):
    return [(a.kind, a.severity, a.step) for a in alerts(events)
            if a.status == "firing" and a.severity != "info"]


class TestGradNorm:
    def test_two_in_a_row_page_critical(self):
        """Non-finite grad norms on two consecutive logged steps: critical at the second."""
        ev = [("loss", t, v, None, 1.0) for t, v in curve(300)]
        ev += [("loss", t, v, None, NAN) for t, v in curve(20, 301)]
        assert pages(ev)[0] == ("nonfinite", "critical", 302)

    def test_an_isolated_overflow_is_info(self):
        """One inf norm every 100 steps (an fp16 loss scaler): info findings, never a page."""
        ev = [("loss", t, v, None, math.inf if t % 100 == 0 else 1.0) for t, v in curve(2000)]
        found = alerts(ev)
        assert pages(ev) == [] and any(a.kind == "nonfinite" and a.severity == "info" for a in found)

    def test_the_scale_search_at_the_start_does_not_page(self):
        """Five overflows in a row before any finite norm: the scaler halving its scale."""
        ev = [("loss", t, v, None, math.inf if t <= 5 else 1.0) for t, v in curve(1000)]
        assert pages(ev) == []

    def test_a_frozen_loss_under_a_nan_norm_pages_at_once(self):
        """The loss repeats its previous value exactly while the norm is NaN: critical."""
        ev = [("loss", t, v, None, 1.0) for t, v in curve(300)]
        ev.append(("loss", 301, ev[-1][2], None, NAN))
        assert pages(ev) == [("nonfinite", "critical", 301)]


class TestBlowUp:
    @pytest.mark.parametrize("scale", [1.0, 0.01, 100.0])
    def test_orders_of_magnitude_at_the_second_point(self, scale):
        """0.06 then 2e8 (a real RL run), then back: critical at point 2, resolved after."""
        ev = [("loss", 1, 0.06 * scale, None), ("loss", 2, 2e8 * scale, None)]
        ev += [("loss", t, scale * 0.06 * t ** -0.2, None) for t in range(3, 400)]
        found = alerts(ev)
        assert [(a.kind, a.severity, a.step) for a in found if a.status == "firing"
                and a.severity != "info"] == [("divergence", "critical", 2)]
        assert any(a.kind == "divergence" and a.status == "resolved" for a in found)

    def test_one_hundredfold_is_not_a_blow_up(self):
        """The rule is orders of magnitude: x100 over the first points is left to the others."""
        det = NonfiniteDetector()
        assert not any(det.update(t, v).reason == "blown" for t, v in [(1, 1.0), (2, 100.0)])

    def test_blown_points_stay_out_of_the_forecast(self):
        mon = RunMonitor()
        for t, v in curve(400):
            mon.update_loss(t, v)
        st = mon.update_loss(401, 1e9)
        assert st.alert and st.l_pred is None
        assert mon.update_loss(402, curve(1, 402)[0][1]).l_pred < 10

    def test_snapshot_keeps_the_reference(self):
        a = NonfiniteDetector()
        for t, v in [(1, 0.5), (2, 0.4), (3, NAN)]:
            a.update(t, v, 1.0 if t < 3 else NAN)
        b = NonfiniteDetector()
        b.restore(a.snapshot())
        assert b.update(4, 600.0, NAN) == a.update(4, 600.0, NAN)
        assert a.reason == "blown" and a.grad_count == 2


def digits_run(seed: int, freeze_at: int | None, steps: int = 1000, opt: str = "adam") -> list:
    """An MLP on load_digits, batch 32, the loss of every step; from ``freeze_at`` on the
    data loader hands the same batch over and over (a frozen loader)."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("sklearn.datasets")
    torch.manual_seed(seed)
    X, y = datasets.load_digits(return_X_y=True)
    X, y = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    o = (torch.optim.Adam(model.parameters(), lr=2e-3) if opt == "adam"
         else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    rng, fn, out, frozen = np.random.default_rng(seed), torch.nn.CrossEntropyLoss(), [], None
    while len(out) < steps:
        order = rng.permutation(len(X))
        for i in range(0, len(X) - 31, 32):
            idx = torch.tensor(order[i:i + 32])
            if freeze_at is not None and len(out) >= freeze_at:
                frozen = idx if frozen is None else frozen
                idx = frozen
            loss = fn(model(X[idx]), y[idx])
            o.zero_grad()
            loss.backward()
            o.step()
            out.append(("loss", len(out) + 1, loss.item(), None))
            if len(out) == steps:
                break
    return out


class TestFrozenLoader:
    @pytest.mark.parametrize("seed, opt", [(0, "adam"), (1, "sgd")])
    def test_pages_within_50_steps_and_holds(self, seed, opt):
        """The same batch from step 500: a critical frozen_loader page within 50 steps, firing
        to the end."""
        found = alerts(digits_run(seed, 500, opt=opt))
        paged = [a for a in found if a.severity != "info"]
        assert paged[0].kind == "frozen_loader" and paged[0].severity == "critical"
        assert 500 < paged[0].step <= 550 and "frozen data loader" in paged[0].message
        assert [a.status for a in paged] == ["firing"]

    def test_the_healthy_run_is_silent(self):
        assert [a for a in alerts(digits_run(0, None)) if a.severity != "info"] == []

    @pytest.mark.parametrize("how", ["x0.01", "x100", "+1000", "twice"])
    def test_same_step_whatever_the_scale_offset_or_a_log_written_twice(self, how):
        ev = digits_run(2, 500)
        f = {"x0.01": lambda v: v * 0.01, "x100": lambda v: v * 100, "+1000": lambda v: v + 1000,
             "twice": lambda v: v}[how]
        moved = [(k, s, f(v), lr) for k, s, v, lr in ev]
        if how == "twice":
            moved = [e for e in moved for _ in (0, 1)]

        def first(events):
            det = FrozenLoaderDetector()
            return next(s for _, s, v, _ in events if det.update(s, v).active)
        assert first(moved) == first(ev)
