"""The end of a cosine schedule, with no lr sent, is no drift (`rules.slower_only`).

A faithful synthetic of LLM pretraining logs like the hidden sets' (618 points, one every
6 steps, 4 decimals): the loss follows the area under its lr (a multi-power law: L0 + A
(1 + area / a0)^-0.5) less an annealing term, the lr warms up over 60 steps and decays by
cosine to a tenth. As the lr reaches its floor the loss keeps making lows, more slowly
than a law fitted without the lr expects: before, 5 of these runs paged a `drift` warning
in their last 300 steps ("rose above its forecast") though the loss never rose. A rise
at the same place still pages, and so does a stop.
"""

from __future__ import annotations

import math
import random

import pytest

from wtwin.detect.replay import alerts

N, EVERY, PEAK, WARM = 618, 6, 3e-4, 60


def llm(seed: int, anneal: float, noise: float = 0.005, tail=None) -> list[tuple]:
    """``tail(step, loss) -> loss``: what happens to the run from 60% of its steps on."""
    rng, area, out, total = random.Random(seed), 0.0, [], N * EVERY
    for i in range(N):
        s = (i + 1) * EVERY
        lr = PEAK * min(1.0, s / WARM) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / total)))
        area += lr * EVERY
        x = 2.2 + 3.0 * (1 + area / 0.02) ** -0.5 - anneal * (1 - lr / PEAK) + noise * rng.gauss(0, 1)
        if tail is not None and s > 0.6 * total:
            x = tail(s, x)
        out.append(("loss", s, round(x, 4), None))   # the lr is not sent
    return out


def pages(events) -> list[tuple]:
    return [(a.kind, a.severity, a.step) for a in alerts(events)
            if a.status == "firing" and a.severity in ("warning", "critical")]


@pytest.mark.parametrize("anneal", [0.0, 0.15, 0.4])
def test_the_flat_end_of_a_cosine_decay_is_not_a_drift(anneal):
    for seed in range(4):
        assert pages(llm(seed, anneal)) == [], (seed, anneal)


@pytest.mark.parametrize("size,over", [(0.1, 300), (0.2, 600)])
def test_a_rise_at_the_end_still_pages(size, over):
    """From 60% on, the loss climbs 0.1 in 300 steps, or 0.2 in 600, on top of its descent:
    a drift. (0.1 in 600 steps only holds the level near its best while the law expects it
    lower: with no lr sent, that is a slower descent, `info`; it paged before.)"""
    got = pages(llm(1, 0.4, tail=lambda s, x: x + size * min(1.0, (s - 0.6 * N * EVERY) / over)))
    assert [k for k, _sev, _step in got][:1] == ["drift"], got


def test_a_stop_at_the_end_still_pages():
    """From 60% on, the loss stops where it was: the forecast falls on, the level does not."""
    stop = {}
    got = pages(llm(1, 0.4, tail=lambda s, x: stop.setdefault("at", x)))
    assert got and got[0][0] in ("plateau", "drift"), got
