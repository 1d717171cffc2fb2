"""Optimizer wrappers: same numbers as torch's, no per-step sync, state round-trips, alerts."""

from __future__ import annotations

import io
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402

from _integrations import InProcessDaemon, wait_for, one_torch_thread  # noqa: E402,F401
from wtwin.emitters.optim import Lion, WTwinAdamW, WTwinLion, WTwinSGD  # noqa: E402

SYNCS = {"item", "__float__", "__int__", "__bool__", "tolist", "numpy", "cpu"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class CountSyncs(TorchFunctionMode):
    """Counts tensor -> host reads (each one is a device sync on an accelerator)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in SYNCS:
            self.n += 1
        return func(*args, **(kwargs or {}))


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 8, generator=g)
    return x, x[:, :1] * 0.5 - x[:, 1:2] + 0.05 * torch.randn(32, 1, generator=g)


def _train(model, opt, steps: int, start: int = 0, lr_at=None, sched=None) -> list[float]:
    losses = []
    for t in range(start, start + steps):
        if lr_at is not None:
            for g in opt.param_groups:
                g["lr"] = lr_at(t)
        x, y = _batch(t)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step(loss=loss) if hasattr(opt, "wtwin") else opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.detach())
    return losses


def _same_params(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


class TestSameNumbersAsTorch:
    @pytest.mark.parametrize("plain, wrapped, kw", [
        (torch.optim.AdamW, WTwinAdamW, {"lr": 1e-2, "weight_decay": 0.1}),
        (torch.optim.SGD, WTwinSGD, {"lr": 5e-2, "momentum": 0.9, "nesterov": True}),
        (Lion, WTwinLion, {"lr": 1e-3, "weight_decay": 0.1}),
    ])
    def test_wrapper_updates_are_bit_identical(self, plain, wrapped, kw):
        """The wrapper changes nothing about the update: parameters stay bit-identical."""
        m1, m2 = _model(), _model()
        _train(m1, plain(m1.parameters(), **kw), 40)
        opt = wrapped(m2.parameters(), **kw)
        _train(m2, opt, 40)
        assert _same_params(m1, m2)
        assert opt.wtwin_step == 40

    def test_lion_matches_its_formula(self):
        """One Lion step by hand: p - lr*(sign(b1*m + (1-b1)*g) + wd*p)."""
        p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
        p.grad = torch.tensor([0.3, -0.1, 0.0])
        m0 = torch.tensor([-1.0, 1.0, 2.0])
        opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.5)
        opt.state[p]["exp_avg"] = m0.clone()
        expected = torch.tensor([1.0, -2.0, 0.5]) * (1 - 0.1 * 0.5) - 0.1 * torch.sign(0.9 * m0 + 0.1 * p.grad)
        opt.step()
        assert torch.allclose(p.detach(), expected)
        assert torch.allclose(opt.state[p]["exp_avg"], 0.99 * m0 + 0.01 * p.grad)

    def test_closure_loss_is_observed(self):
        """step(closure) uses the closure's loss; the buffer is read at log_every."""
        m = _model()
        opt = WTwinSGD(m.parameters(), lr=1e-2, log_every=5)
        x, y = _batch(0)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            return loss

        for _ in range(5):
            opt.step(closure)
        assert opt.wtwin.last_state is not None and opt.wtwin.last_state.step == 5


class TestNoPerStepSync:
    def test_one_read_per_log_every_steps(self):
        """100 steps at log_every=25 cost exactly 4 host reads more than plain SGD (which costs 0)."""
        m1, m2 = _model(), _model()
        base, wrapped = torch.optim.SGD(m1.parameters(), lr=1e-2), WTwinSGD(m2.parameters(), lr=1e-2, log_every=25)
        batches = [_batch(t) for t in range(100)]
        counts = []
        for model, opt in ((m1, base), (m2, wrapped)):
            with CountSyncs() as c:
                for x, y in batches:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step(loss=loss) if opt is wrapped else opt.step()
            counts.append(c.n)
        assert counts == [0, 4]
        assert wrapped._wtwin_buf.reads == 4
        assert wrapped.wtwin.last_state.step == 100


class TestStateAndSchedulers:
    def test_state_dict_round_trips_through_torch_save(self):
        """Saved mid-run and loaded into a fresh optimizer, both continue identically."""
        m1 = _model()
        o1 = WTwinAdamW(m1.parameters(), lr=1e-2, log_every=7)
        _train(m1, o1, 250)
        buf = io.BytesIO()
        torch.save({"model": m1.state_dict(), "opt": o1.state_dict()}, buf)
        buf.seek(0)
        ckpt = torch.load(buf, weights_only=True)
        m2 = _model(seed=1)
        m2.load_state_dict(ckpt["model"])
        o2 = WTwinAdamW(m2.parameters(), lr=1e-2, log_every=7)
        o2.load_state_dict(ckpt["opt"])
        assert o2.wtwin_step == 250
        assert o2.wtwin.monitor.snapshot() == o1.wtwin.monitor.snapshot()
        _train(m1, o1, 60, start=250)
        _train(m2, o2, 60, start=250)
        o1.wtwin_flush(), o2.wtwin_flush()
        assert _same_params(m1, m2)
        assert o1.wtwin.last_state == o2.wtwin.last_state
        assert o2.wtwin.last_state.step == 310

    def test_lr_scheduler_drives_the_wrapper(self):
        """A cosine schedule steps without warnings and the lr the tracker sees follows it."""
        m = _model()
        with InProcessDaemon() as d:
            opt = WTwinAdamW(m.parameters(), lr=1e-2, log_every=1, endpoint=d.endpoint, run="sched")
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=50)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                _train(m, opt, 20, sched=sched)
            expected = opt.param_groups[0]["lr"]
            prev = sched.get_last_lr()[0]
            assert math.isclose(expected, prev)
            run = wait_for(lambda: (r := d.server.table.get("sched")) and r.step == 20 and r, 10,
                           what="20 steps at the daemon")
            lr_19 = 1e-2 * (1 + math.cos(math.pi * 19 / 50)) / 2
            assert math.isclose(run.lr, lr_19, rel_tol=1e-9)
            opt.close()

    @pytest.mark.parametrize("preset", ["pretraining", "adaptive_pretraining", "finetuning", "custom"])
    def test_every_upstream_preset_runs_embedded(self, preset):
        """The four upstream presets build an in-process monitor that scores every step."""
        m = _model()
        opt = WTwinAdamW(m.parameters(), lr=1e-3, preset=preset, log_every=20)
        _train(m, opt, 40)
        assert opt.wtwin.monitor.preset == preset and opt.wtwin.last_state.step == 40

    def test_bad_preset_is_refused(self):
        """An unknown preset fails at construction, naming the choices."""
        with pytest.raises(ValueError, match="pretraining"):
            WTwinSGD(_model().parameters(), lr=0.1, preset="fast")


def _blowup(t: int) -> float:
    return 1e-2 if t < 300 else 5.0


class TestAlerts:
    def test_embedded_monitor_calls_upstream_callback_on_blowup(self):
        """No daemon: an LR blow-up at step 300 reaches wtwin_on_alert(step, W, state) in-process."""
        seen = []
        m = _model()
        opt = WTwinSGD(m.parameters(), lr=1e-2, momentum=0.9, log_every=10,
                       wtwin_on_alert=lambda step, W, state: seen.append((step, W, state)))
        assert opt.wtwin.mode == "embedded"
        _train(m, opt, 600, lr_at=_blowup)
        opt.close()
        assert seen, "no alert after the LR blow-up"
        step, W, state = seen[0]
        assert 300 < step <= 600
        assert state.step >= step and hasattr(state, "W") and hasattr(state, "D")
        kinds = {a["kind"] for a in opt.wtwin_alerts if a["status"] == "firing"}
        assert kinds and all(a["source"] == "embedded" for a in opt.wtwin_alerts)

    def test_clean_run_stays_silent_embedded(self):
        """A healthy run at a steady learning rate raises no warning or critical alert."""
        m = _model()
        opt = WTwinAdamW(m.parameters(), lr=3e-3, log_every=50)
        _train(m, opt, 600)
        opt.close()
        assert [a for a in opt.wtwin_alerts if a["severity"] != "info"] == []

    def test_daemon_alert_comes_back_to_the_optimizer(self):
        """With a daemon: a NaN loss fires a critical alert there and wtwin_on_alert sees its dict."""
        seen = []
        m = _model()
        with InProcessDaemon() as d:
            opt = WTwinAdamW(m.parameters(), lr=1e-2, log_every=1, endpoint=d.endpoint,
                             run="opt-nan", wtwin_on_alert=lambda s, W, st: seen.append((s, W, st)))
            assert opt.wtwin.mode == "daemon"
            _train(m, opt, 30)
            opt.step(loss=torch.tensor(float("nan")))
            wait_for(lambda: d.firing("opt-nan", ("critical",)), 10, what="daemon alert")

            def stepped():
                opt.step(loss=torch.tensor(1.0))
                return seen
            wait_for(stepped, 10, what="alert back at the optimizer")
            opt.close()
        step, W, alert = seen[0]
        assert step == 31 and alert["kind"] == "nonfinite" and alert["severity"] == "critical"
        assert alert["run"] == "opt-nan" and alert["source"] == "daemon"

    def test_non_zero_rank_does_nothing(self, monkeypatch):
        """Under RANK=1 the wrapper is a plain optimizer: no emitter, no monitor."""
        monkeypatch.setenv("RANK", "1")
        opt = WTwinSGD(_model().parameters(), lr=0.1, run="rank1")
        assert opt.wtwin.mode == "off"
        m = _model()
        opt = WTwinSGD(m.parameters(), lr=0.1)
        _train(m, opt, 20)
        assert opt.wtwin.last_state is None
