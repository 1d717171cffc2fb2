"""The forecast's own robust fit (`laws.fit`, whose solver is `laws._minimize`, a numpy
Levenberg-Marquardt) against scipy's `least_squares` on the refits the forecast asks for,
in CI (`make test`; scipy is a dev dependency only, so it is imported, not skipped: a CI
without it fails here). The agreement: its soft-L1 cost must be as low as scipy's (median
ratio <= 1.01, 90th percentile <= 1.1; on these short runs 1.004 and 1.05; the full
benchmark, tests/bench/fit_vs_scipy.py: 1.0009 and 1.018). The multi-power law and fits
with frozen parameters have no scipy reference (scipy never did them) and are not compared."""

import math
import random
import sys
from pathlib import Path

import numpy as np
import scipy  # noqa: F401  (a dev dependency: missing, this test fails instead of skipping)

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from fit_vs_scipy import scipy_fit  # noqa: E402

from wtwin.detect import forecast, laws  # noqa: E402


def refits():
    captured, fit = [], laws.fit

    def capture(*a, **k):
        captured.append((a, k))
        return fit(*a, **k)

    laws.fit = capture
    try:
        rng = random.Random(1)
        for c, a, b, sig in [(2.6, 9, 0.35, 0.05), (1.0, 5, 0.6, 0.1)]:
            det = forecast.ForecastDetector()
            for t in range(1, 15001):
                det.update(t, c + a * t ** -b + rng.gauss(0, sig))
        det = forecast.FinetuningDetector()
        for t in range(1, 3001):
            det.update(t, 0.5 + 2 * math.exp(-t / 800) + rng.gauss(0, 0.02))
        det = forecast.ForecastDetector()
        for t in range(1, 8001):
            lr = 3e-4 * 0.5 * (1 + math.cos(math.pi * t / 8000))
            det.update(t, 2.5 + 6 * (t * 3e-4) ** -0.3 + rng.gauss(0, 0.04), lr)
    finally:
        laws.fit = fit
    return captured


def test_the_numpy_fit_reaches_scipys_cost():
    ratios = []
    for a, k in refits():
        law, X, y, n, scale = a[:5]
        ours, ref = laws.fit(*a, **k), scipy_fit(*a, **k)
        if ours is None or ref is None:
            continue

        def cost(p):
            r = np.sqrt(n) * (laws.evaluate(law, X, p) - y) / scale
            return float(np.sum(np.sqrt(1 + r * r) - 1))
        ratios.append(cost(ours[0]) / cost(ref))
    assert len(ratios) >= 40
    assert np.median(ratios) <= 1.01 and np.percentile(ratios, 90) <= 1.1, sorted(ratios)[-5:]
