"""A preference-tuning run cut off in its warm-up is no spike (issue 36).

The shape, from a hidden set's clean DPO run that paged `spike` at step 120: a DPO loss
is exactly ln 2 = 0.6931 while the policy equals its reference, so the first logged
points repeat it to the digit; as the lr ramps up the policy moves and the loss
scatters, more with each point. The spike detector's scale was the first change it saw,
winsorized at 4 scales a point, so a scale seeded by the warm-up's first tiny change
could not grow with the scatter, and an ordinary point a few later was a sustained
"jump" ("shifted up by 0.0201, 10x the run's progress"). Its scale now starts as the
mean of the first ten first differences that moved (`spike.WARM_POINTS`). The same
detector still pages a jump that holds once the warm-up is over.
"""

from __future__ import annotations

import math
import random

import pytest

from wtwin.detect.replay import alerts

LN2 = round(math.log(2), 4)


def dpo(seed: int, every: int, noise: float, n: int = 130, warm: int = 150, frozen: int = 8,
        jump_at: int | None = None, jump: float = 0.0) -> list[tuple]:
    """``frozen`` points at exactly ln 2, then a loss whose scatter grows with the lr's
    linear warm-up over ``warm`` steps; printed at 4 decimals, as Hugging Face logs it."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        step = (i + 1) * every
        frac = min(1.0, step / warm)
        x = LN2 if i < frozen else LN2 - 0.0005 * (i - frozen) + noise * frac * rng.gauss(0, 1)
        if jump_at is not None and i >= jump_at:
            x += jump
        out.append(("loss", step, round(max(x, 0.01), 4), 5e-7 * frac))
    return out


def pages(events, preset):
    return [(a.kind, a.severity, a.step) for a in alerts(events, preset=preset)
            if a.status == "firing" and a.severity in ("warning", "critical")]


@pytest.mark.parametrize("preset", ["finetuning", "pretraining"])
@pytest.mark.parametrize("every", [1, 5])
@pytest.mark.parametrize("noise", [0.02, 0.1])
def test_a_dpo_warm_up_is_no_spike(preset, every, noise):
    paged = {seed: [p for p in pages(dpo(seed, every, noise), preset) if p[0] == "spike"]
             for seed in range(10)}
    assert not any(paged.values()), paged


def test_the_case_that_paged():
    """Seed 4, a point every 5 steps: `spike` warning at step 70 before the change."""
    assert pages(dpo(4, 5, 0.1), "finetuning") == []


@pytest.mark.parametrize("seed", range(3))
def test_a_jump_that_holds_after_the_warm_up_still_pages(seed):
    got = pages(dpo(seed, 1, 0.02, n=400, jump_at=250, jump=0.3), "finetuning")
    assert got and got[0][0] in ("spike", "drift", "divergence") and 250 < got[0][2] <= 300, got


def without_lr(events):
    return [(kind, step, x, None) for kind, step, x, _lr in events]


@pytest.mark.parametrize("preset", ["finetuning", "pretraining"])
@pytest.mark.parametrize("every,send_lr", [(1, True), (1, False), (10, True)])
def test_ln2_from_the_first_point_on_is_not_a_frozen_loss(preset, every, send_lr):
    """A DPO or reward-model loss is ln 2 on every batch while the policy equals its
    reference: under a slow warm-up, 40 logged points print 0.6931 before it moves. That
    loss has not moved yet; it did not stop (the frozen rule paged `plateau` "logged loss
    frozen at 0.6931 (to single precision) for 20 points in a row" at the 21st)."""
    ev = dpo(0, every, 0.02, n=300, warm=150 * every, frozen=40)
    assert pages(ev if send_lr else without_lr(ev), preset) == []


def test_a_loss_that_never_moves_is_no_learning():
    """The same value from the first point to the end (an lr of 0, a logger that prints
    the first loss forever) pages once the grace is over, as no learning."""
    ev = [("loss", 10 * (i + 1), LN2, None) for i in range(100)]
    found = [a for a in alerts(ev, preset="finetuning") if a.status == "firing" and a.severity != "info"]
    assert [(a.kind, a.severity) for a in found] == [("plateau", "warning")], found
    assert found[0].message.startswith("no learning") and 300 <= found[0].step <= 400, found[0]
