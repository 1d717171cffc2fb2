"""The run page's "no forecast yet" estimate against the real detectors: when does the
first forecast appear for runs that log every few steps?"""

from __future__ import annotations

import itertools
import random

import pytest

from wtwin.detect import RunMonitor
from wtwin.daemon.web.forecast_wait import forecast_wait


def first_forecast(preset: str, every: int, lr) -> int | None:
    """The step of the first loss point whose state carries a forecast, fed for real."""
    m, rng = RunMonitor(preset), random.Random(0)
    for k in range(1, 3000):
        s = every * k
        if m.update_loss(s, 3 + 5 * s ** -0.3 + rng.gauss(0, 0.02), lr).l_pred is not None:
            return s
    return None


class TestForecastWait:
    def test_the_issue_case_23_points_every_10_steps(self):
        """logging_steps=10, 23 points: the forecast comes at step 310, 8 points on."""
        w = forecast_wait("pretraining", [10 * (i + 1) for i in range(23)], lr_known=True)
        assert (w["first_step"], w["points_to_go"], w["points"], w["every"]) == (310, 8, 23, 10)
        assert w["warmup"] == 300 and w["min_points"] == 7
        assert first_forecast("pretraining", 10, 1e-3) == 310

    @pytest.mark.parametrize("preset", ["pretraining", "adaptive_pretraining", "finetuning"])
    def test_estimate_is_within_two_points_of_the_detectors(self, preset):
        """Over logging intervals 1..50 and 3..20 points, with and without lr."""
        for every, n, lr in itertools.product((1, 3, 7, 10, 25, 50), (3, 8, 20), (None, 1e-3)):
            real = first_forecast(preset, every, lr)
            steps = [every * (i + 1) for i in range(n)]
            if real is None or real <= steps[-1]:
                continue            # such a run would have a forecast already
            w = forecast_wait(preset, steps, lr_known=lr is not None)
            assert abs(w["first_step"] - real) <= 2 * every, (every, n, lr, w, real)

    def test_unknown_preset_or_no_points_say_nothing(self):
        assert forecast_wait("nope", [1, 2], False) is None
        assert forecast_wait("pretraining", [], False) is None
