"""A data-order bump is not a page; the same rise that stays is (issue 36).

The shape, from hidden runs of several authors that share one data order: GPT-2-size
pretraining, 19k steps, a loss from about 11 to 3.3 (progress ~7.7) logged every step
and printed at 4 decimals; around step 5,950 the loss rises +0.055-0.06 (0.8% of the
progress) and passes within a few hundred steps. At gate 3 it made most of the clean
pages on those runs; at the shipped gate 4 most were silent. The synthetic here rises
over 400 steps and decays with a time constant of 400: the shape that reproduces
both (gate 3 pages half of its cases, `test_the_rejected_gate_pages_it`; a bump over
60 steps gone within 300 pages at neither gate). Two noise levels of a per-step loss
(0.01 and 0.02), three seeds, read as a log would be (`wtwin.detect.replay`, as
`wtwin monitor` does).

The same code must still page a rise that stays: a ramp of +0.1 over 600 steps from
the same step (3% of the loss level) pages `warning`. Where the bump starts to page at
gate 4 is measured, so the margin is stated, not assumed: +0.075 (1.25x the real bump)
is silent, +0.09 (1.5x) pages (`test_the_margin_to_the_real_bump`). That is under the
2x the calibration asks of a gate: a bump of this shape 1.5x larger than the ones seen
would page. Known limit, in docs/DETECTION.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from wtwin.detect.replay import alerts

STEPS, ONSET = 19_000, 5_950


def run(extra, noise: float, seed: int) -> list[tuple]:
    s = np.arange(1, STEPS + 1)
    loss = 3.1 + 7.9 * ((s + 50) / 50.0) ** -0.55 + np.random.default_rng(seed).normal(0, noise, STEPS)
    loss = np.round(loss + extra(s - ONSET), 4)
    return [("loss", int(step), float(x), None) for step, x in zip(s, loss)]


def bump(height: float, rise: int = 400, tau: int = 400):
    """Up ``height`` over ``rise`` steps, then gone with a time constant of ``tau``."""
    return lambda d: np.where(d > 0, height * np.minimum(d / rise, 1) * np.exp(-np.maximum(d - rise, 0) / tau), 0.0)


def ramp(d):
    return np.where(d > 0, 0.1 * np.minimum(d / 600, 1), 0.0)


def pages(events, gate: float | None = None) -> list[tuple]:
    kw = {} if gate is None else {"effect": {"gate": gate, "jump_gate": gate}}
    return [(a.kind, a.severity, a.step) for a in alerts(events, **kw)
            if a.status == "firing" and a.severity in ("warning", "critical")]


@pytest.mark.parametrize("noise", [0.01, 0.02])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_data_order_bump_stays_below_a_page(noise, seed):
    assert pages(run(bump(0.06), noise, seed)) == []


@pytest.mark.parametrize("noise", [0.01, 0.02])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_same_rise_that_stays_pages(noise, seed):
    got = pages(run(ramp, noise, seed))
    assert got and got[0][1] == "warning" and ONSET < got[0][2] < ONSET + 800, got


def test_the_rejected_gate_pages_it():
    """Gate 3 (what the calibration once chose at its grid's floor) pages the bump in
    some of the cases: the synthetic has the hidden runs' trouble, not an easier one."""
    paged = [bool(pages(run(bump(0.06), noise, seed), gate=3.0)) for noise in (0.01, 0.02) for seed in range(3)]
    assert 2 <= sum(paged) <= 5, paged


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_a_bump_that_pages_pages_once(noise):
    """+0.09 pages a drift; it comes back within the band the drift left while the
    forecast still alarms, and the loss, flat there, is under a forecast that falls: the
    same incident, not a `plateau` page after the drift (`rules.plateau`)."""
    got = pages(run(bump(0.09), noise, 0))
    assert [k for k, _sev, _step in got] == ["drift"], got


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_the_margin_to_the_real_bump(noise):
    assert pages(run(bump(0.075), noise, 0)) == []
    assert pages(run(bump(0.09), noise, 0))
