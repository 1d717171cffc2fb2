"""WW-PGD (emitters/projection.py, and the WWPGD optimizer of emitters/wwpgd.py):
each corrected property checked directly."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from wtwin.daemon.spectral import analyze  # noqa: E402
from wtwin.daemon.spectral.powerlaw import fit_power_law  # noqa: E402
from wtwin.emitters import projection as wwpgd  # noqa: E402
from wtwin.emitters.projection import cayley_factor, project_weight, upstream_cayley_factor  # noqa: E402
from wtwin.emitters.wwpgd import WWPGD  # noqa: E402


def fit(model, opt, x, y, steps: int) -> list[float]:
    """``steps`` full-batch steps of cross-entropy on (x, y); the loss before each."""
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _heavy(shape, df=3.0, seed=0):
    torch.manual_seed(seed)
    return torch.distributions.StudentT(df).sample(shape).float()


def _tail_modes(w, new, k, kind="dense"):
    """Eigenvalues (measurement units) of ``new`` along the top-k singular directions of ``w``."""
    x, scale = wwpgd._stack(w.double(), kind)
    y, _ = wwpgd._stack(new.double(), kind)
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    s_new = torch.diagonal(u.mT @ y @ vh.mT, dim1=-2, dim2=-1)
    lam_old, lam_new = (scale * s * s).flatten(), (scale * s_new * s_new).flatten()
    order = torch.argsort(lam_old, descending=True)[:k]
    return lam_old, lam_new, order


class TestCayleyStep:
    def test_factor_positive_and_moves_toward_target_for_any_step(self):
        """For eta*|g| > 1 the factor stays in (0, inf) and shrinks |g| without overshoot."""
        g = torch.linspace(-8, 8, 161, dtype=torch.float64)
        for eta in (0.1, 1.0, 10.0, 1e6):
            f = cayley_factor(g, eta)
            assert torch.all(f > 0) and torch.all(torch.isfinite(f))
            g_new = g + torch.log(f)
            assert torch.all(torch.abs(g_new) <= torch.abs(g) + 1e-12)
            assert torch.all(g_new * g >= 0)  # same side of the target: no overshoot
        assert torch.any(upstream_cayley_factor(g, 10.0) < 0)  # the defect being fixed

    def test_first_order_equals_upstream(self):
        """For small eta the step is upstream's (1 - eta g)/(1 + eta g)."""
        g = torch.linspace(-1, 1, 21, dtype=torch.float64)
        eta = 1e-4
        assert torch.allclose(torch.log(cayley_factor(g, eta)), torch.log(upstream_cayley_factor(g, eta)), atol=1e-7)


class TestProjection:
    def test_fit_matches_the_daemon_fit(self):
        """The torch tail fit in wwpgd equals the weightwatcher-compatible numpy fit."""
        w = _heavy((200, 80))
        ev = torch.linalg.svdvals(w.double()) ** 2
        ours = wwpgd.fit_tail(ev)
        ref = fit_power_law(ev.numpy())
        assert abs(ours[0] - ref.alpha) < 1e-9 and ours[2] == ref.num_pl_spikes

    def test_enforce_makes_tail_trace_log_zero(self):
        """After one projection with erg='enforce' the tail trace-log is 0 (detX units)."""
        w = _heavy((300, 100))
        new, info = project_weight(w.double(), "dense", beta=0.7, eta=0.5, erg="enforce")
        lam_old, lam_new, tail = _tail_modes(w, new, info["num_pl_spikes"])
        trace_log = torch.sum(torch.log(lam_new[tail] * lam_new.numel() / lam_new.sum()))
        assert abs(float(trace_log)) < 1e-8
        assert abs(float(torch.sum(torch.log(lam_old[tail] * lam_old.numel() / lam_old.sum())))) > 1.0

    def test_preserve_keeps_tail_log_determinant(self):
        """erg='preserve' (upstream) keeps sum(log lambda) over the tail."""
        w = _heavy((300, 100), seed=1)
        new, info = project_weight(w.double(), "dense", beta=0.7, eta=2.0, erg="preserve")
        lam_old, lam_new, tail = _tail_modes(w, new, info["num_pl_spikes"])
        assert torch.allclose(torch.log(lam_new[tail]).sum(), torch.log(lam_old[tail]).sum(), atol=1e-8)
        assert not torch.allclose(lam_new[tail], lam_old[tail])

    def test_tail_moves_toward_power_law_target(self):
        """With a huge step and beta=1 the tail becomes A i^-q exactly; the bulk is untouched."""
        w = _heavy((300, 100), seed=2)
        new, info = project_weight(w.double(), "dense", beta=1.0, eta=1e9, erg="off", q=1.0)
        lam_old, lam_new, tail = _tail_modes(w, new, info["num_pl_spikes"])
        slope = torch.diff(torch.log(lam_new[tail])) / torch.diff(torch.log(torch.arange(1.0, tail.numel() + 1)))
        assert torch.allclose(slope, torch.full_like(slope, -1.0), atol=1e-6)
        bulk = torch.ones_like(lam_old, dtype=torch.bool)
        bulk[tail] = False
        assert torch.allclose(lam_new[bulk], lam_old[bulk], rtol=1e-9)
        assert analyze({"w.weight": new})[0].alpha < analyze({"w.weight": w})[0].alpha

    def test_conv2d_projected_at_the_scale_it_was_measured(self):
        """Conv2d: the measured (pooled, sqrt(1/2)-scaled) tail after projection is the target itself."""
        torch.manual_seed(3)
        w = torch.randn(32, 16, 3, 3, dtype=torch.float64)
        new, info = project_weight(w, "conv2d", beta=1.0, eta=1e9, erg="off", q=1.0)
        lam_old, lam_new, tail = _tail_modes(w, new, info["num_pl_spikes"], kind="conv2d")
        ranks = torch.arange(1.0, tail.numel() + 1, dtype=torch.float64)
        log_a = torch.mean(torch.log(lam_old[tail]) + torch.log(ranks))
        assert torch.allclose(torch.log(lam_new[tail]), log_a - torch.log(ranks), atol=1e-8)
        # the same numbers as the engine measures them from the saved tensor:
        measured = analyze({"c.weight": new})[0]
        assert measured.lambda_max == pytest.approx(float(torch.exp(log_a)), rel=1e-8)

    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_low_precision_weights_upcast_and_cast_back(self, dtype):
        """bf16/fp16 weights are projected (in float64) and come back in their own dtype."""
        w = _heavy((128, 64), seed=4).to(dtype)
        new, info = project_weight(w, "dense", beta=0.5, erg="preserve")
        assert info["projected"] and new.dtype == dtype and torch.isfinite(new.float()).all()
        assert not torch.equal(new, w)


class TestWWPGDOptimizer:
    def _model(self):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def test_is_an_optimizer_and_trains(self):
        """WWPGD is a torch Optimizer; step() is the base step; loss falls."""
        model = self._model()
        opt = WWPGD(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
        assert isinstance(opt, torch.optim.Optimizer)
        losses = fit(model, opt, torch.randn(256, 32), torch.randint(0, 10, (256,)), 30)
        assert losses[-1] < losses[0]

    def test_lr_scheduler_drives_the_base_optimizer(self):
        """A scheduler built on WWPGD changes the base optimizer's learning rate."""
        model = self._model()
        base = torch.optim.SGD(model.parameters(), lr=0.1)
        opt = WWPGD(model, base)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        model(torch.randn(4, 32)).sum().backward()
        opt.step()
        sched.step()
        assert base.param_groups[0]["lr"] == pytest.approx(0.05)

    def test_state_dict_round_trip(self):
        """state_dict/load_state_dict restore the base state and the projection count."""
        model = self._model()
        opt = WWPGD(model, torch.optim.AdamW(model.parameters(), lr=1e-3), warmup=0.0, ramp=0.0)
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        opt.project(0, 10)
        sd = opt.state_dict()
        model2 = self._model()
        opt2 = WWPGD(model2, torch.optim.AdamW(model2.parameters(), lr=1e-3))
        opt2.load_state_dict(sd)
        assert opt2.projections == 1
        assert torch.equal(opt2.base_optimizer.state_dict()["state"][0]["exp_avg"],
                           opt.base_optimizer.state_dict()["state"][0]["exp_avg"])

    def test_warmup_then_linear_ramp(self):
        """No projection during warm-up; strength rises linearly to beta, then stays."""
        s = [wwpgd.ramp(e, 10, beta=0.5, warmup=0.2, ramp_frac=0.4) for e in range(10)]
        assert s[:2] == [0.0, 0.0]
        assert s[2:6] == pytest.approx([0.125, 0.25, 0.375, 0.5])
        assert s[6:] == [0.5] * 4
        model = self._model()
        opt = WWPGD(model, torch.optim.SGD(model.parameters(), lr=0.1), warmup=0.2, ramp=0.4)
        before = model[0].weight.detach().clone()
        assert opt.project(0, 10) == {} and torch.equal(model[0].weight, before)
        report = opt.project(5, 10)
        assert report["0.weight"]["strength"] == 0.5 and not torch.equal(model[0].weight, before)


def test_emitters_import_does_not_import_torch():
    """wtwin.emitters and wtwin.emitters.torch import without torch/numpy; WWPGD resolves lazily."""
    code = ("import sys, wtwin.emitters, wtwin.emitters.torch as t;"
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, 'eager import';"
            "W = t.WWPGD; assert 'torch' in sys.modules; print(W.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "WWPGD"
