"""`Rewind` (closed-loop recovery): the action on its own, then a tiny torch model with an
injected spike against a real wtwind over real sockets.

The spike is in the data, as in the large runs that do this by hand: three batches with
labels x6 (steps 600-602) throw an SGD-trained MLP off; its loss stays up and the daemon's
divergence detector fires a critical alert some 20 steps later. The rewind restores the
checkpoint of step 500, never trains again on the batches it skipped, and halves the lr.
"""

from __future__ import annotations

import math

import pytest

from wtwin.emitters import wire
from wtwin.emitters.actions import Rewind


def alert(kind="divergence", severity="critical", step=620, status="firing", started_at=1.0):
    return {"run": "r", "kind": kind, "severity": severity, "status": status, "step": step,
            "started_at": started_at}


class Audit:
    """Stands in for an Emitter's ``rewind``: keeps the events, encoded as on the wire."""

    def __init__(self) -> None:
        self.events = []

    def rewind(self, step, from_step, **fields):
        ev = {"v": 1, "type": "rewind", "run": "r", "seq": len(self.events) + 1, "step": step,
              "from_step": from_step, **{k: v for k, v in fields.items() if v is not None}}
        events, rejects = wire.decode(wire.encode(ev))
        assert rejects == [], rejects
        self.events += events


class TestRewindAction:
    def test_default_trigger_is_a_critical_spike_or_divergence(self):
        """Critical divergence/spike match; a warning spike, a NaN or a resolve do not."""
        r = Rewind()
        assert r.matches(alert()) and r.matches(alert(kind="spike"))
        assert not r.matches(alert(kind="spike", severity="warning"))
        assert not r.matches(alert(kind="nonfinite"))
        assert not r.matches(alert(status="resolved"))
        assert Rewind(min_severity="warning", kinds=None).matches(alert(kind="drift", severity="warning"))

    def test_restores_the_newest_checkpoint_before_the_onset(self):
        """lookback 100 from an alert at step 620: the checkpoint of step 500, not 550 or 600."""
        restored = []
        r = Rewind(restore=restored.append).attach(audit := Audit())
        for s in (100, 300, 500, 550, 600):
            r.saved(s, f"/ckpt/step-{s}.pt")
        r(alert(step=620))
        plan = r.apply(633)
        assert (plan.to_step, plan.from_step, plan.count) == (500, 633, 1)
        assert restored == ["/ckpt/step-500.pt"]
        assert [c[0] for c in r.checkpoints] == [100, 300, 500]      # the future it left
        assert audit.events[0]["step"] == 500 and audit.events[0]["from_step"] == 633
        assert audit.events[0]["checkpoint"] == "step-500.pt"        # a name, never the folder
        assert r.apply(634) is None

    def test_budget_and_missing_checkpoints_are_refused_with_a_reason(self):
        """At most max_rewinds; an alert with no checkpoint old enough is refused too."""
        r = Rewind(max_rewinds=1)
        r(alert(step=50))
        assert r.pending is None and "no checkpoint" in r.refused[-1][1]
        r.saved(100, "a")
        r(alert(step=300, started_at=2.0))
        assert r.apply(310).to_step == 100
        r(alert(step=400, started_at=3.0))
        assert r.pending is None and "budget" in r.refused[-1][1] and r.left == 0

    def test_lr_scale_reaches_optimizer_and_scheduler(self):
        """The restored lr is scaled, and stays scaled through the scheduler's next steps."""
        torch = pytest.importorskip("torch")
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        r = Rewind(lr_scale=0.5)
        r.saved(10, None)
        r(alert(step=200))
        r.apply(205, optimizers=[opt], schedulers=[sched])
        opt.step()
        sched.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(0.05)

    def test_bad_arguments_say_what_is_wrong(self):
        for kw in ({"max_rewinds": 0}, {"lookback": -1}, {"lr_scale": 0.0}, {"keep": 0},
                   {"min_severity": "fatal"}):
            with pytest.raises(ValueError):
                Rewind(**kw)


BAD, BAD_FACTOR, CKPT_EVERY, BATCHES = range(600, 603), 6.0, 50, 1000


def data_stream(torch, bad=BAD, n_batches: int = BATCHES, seed: int = 1):
    """Batch i (1-based) of a smooth regression task; batches in ``bad`` have labels x6."""
    g = torch.Generator().manual_seed(seed)
    for i in range(1, n_batches + 1):
        x = torch.randn(32, 16, generator=g)
        y = torch.sin(x[:, :1] * 2) + x[:, 1:2] ** 2 * 0.5 + 0.05 * torch.randn(32, 1, generator=g)
        yield i, x, (y * BAD_FACTOR if i in bad else y)


def train(torch, emit, rewind: Rewind, tmp_path, bad=BAD, stop=None, n_batches=BATCHES):
    """The plain loop of the docs: SGD on an MLP, a checkpoint every 50 steps, the data
    never rewound. Returns the optimizer and the (step, loss) pairs after a rewind."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9)

    def restore(path):
        ck = torch.load(path)
        net.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])

    rewind.restore = restore
    step, after = 0, []
    for _i, x, y in data_stream(torch, bad, n_batches):
        step += 1
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        emit.loss(step, loss.item(), lr=opt.param_groups[0]["lr"])
        if rewind.done:
            after.append((step, loss.item()))
        if step % CKPT_EVERY == 0:
            torch.save({"model": net.state_dict(), "opt": opt.state_dict()}, tmp_path / f"step-{step}.pt")
            rewind.saved(step, tmp_path / f"step-{step}.pt")
        if (plan := rewind.apply(step, optimizers=[opt])) is not None:
            step = plan.to_step
        if stop:
            break
    return opt, after


class TestRewindLive:
    def test_plain_loop_rewinds_past_an_injected_spike(self, tmp_path):
        """Divergence (critical) -> rewind to step 500, spiking batches skipped, lr halved;
        afterwards the loss is inside the forecast's band and no critical alert fires."""
        torch = pytest.importorskip("torch")
        from _integrations import InProcessDaemon, wait_for
        from wtwin.emitters import connect

        rewind = Rewind(lr_scale=0.5)
        with InProcessDaemon() as d:
            emit = connect(d.endpoint, "rewind-plain", on_alert=rewind)
            rewind.attach(emit)
            opt, after = train(torch, emit, rewind, tmp_path)
            emit.close()
            run = d.server.table.get("rewind-plain")
            wait_for(lambda: run.status != "running", 10, what="run_end at the daemon")
            critical = [a for a in d.alerts if a.run == "rewind-plain" and a.severity == "critical"]
            mine = [a for a in d.alerts if a.run == "rewind-plain"]
            state, audit = run.last_state, list(run.rewinds)
            cols = run.series.train.columns()   # truncated at the resume: after-rewind points
        assert len(rewind.done) == 1, rewind.refused
        plan = rewind.done[0]
        assert plan.alert["kind"] == "divergence" and plan.alert["step"] > BAD[0]
        assert plan.to_step == 500 and plan.from_step > plan.alert["step"]
        assert [(a.kind, a.status) for a in critical] == [("divergence", "firing"), ("divergence", "resolved")]
        post = [a for a in mine if a.started_at >= audit[0]["at"] and a.status == "firing"]
        assert post and [a for a in post if a.severity != "info"] == []   # the resume: info
        assert audit[0]["step"] == 500 and audit[0]["from_step"] == plan.from_step
        assert audit[0]["kind"] == "divergence" and audit[0]["checkpoint"] == "step-500.pt"
        assert opt.param_groups[0]["lr"] == pytest.approx(0.015)
        assert state.band_lo <= state.l_obs <= state.band_hi
        assert all(math.isfinite(v) for _, v in after) and max(v for _, v in after) < 2.0
        banded = [(lo, v, hi) for s, v, lo, hi in zip(cols["step"], cols["loss"], cols["band_lo"],
                                                      cols["band_hi"]) if s > plan.to_step and lo is not None]
        inside = sum(lo <= v <= hi for lo, v, hi in banded) / len(banded)
        print(f"after the rewind: {len(banded)} steps, {inside:.1%} inside their own band")
        assert len(banded) > 300 and inside >= 0.95, inside   # each step against its own band

    def test_past_its_budget_a_second_spike_stops_the_run(self, tmp_path):
        """max_rewinds=1 and two bad stretches (data batches 600 and 1100, steps about 600
        and 970 after the first rewind): the first is rewound, the second refused
        (with the reason) and handed to its on_refused, a StopTraining that ends the loop."""
        torch = pytest.importorskip("torch")
        from _integrations import InProcessDaemon
        from wtwin.emitters import connect
        from wtwin.emitters.actions import StopTraining

        stop = StopTraining()
        rewind = Rewind(max_rewinds=1, on_refused=stop)
        with InProcessDaemon(detection__cooldown_s=0) as d:   # a second firing soon after
            emit = connect(d.endpoint, "rewind-budget", on_alert=rewind)
            rewind.attach(emit)
            train(torch, emit, rewind, tmp_path, bad=set(BAD) | set(range(1100, 1103)),
                  stop=stop, n_batches=1400)
            emit.close("killed")
        assert len(rewind.done) == 1 and rewind.done[0].to_step == 500
        assert len(rewind.refused) == 1 and "budget of 1" in rewind.refused[0][1]
        assert stop and stop.alert is rewind.refused[0][0] and stop.alert["step"] > 1100 - 200
