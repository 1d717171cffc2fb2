"""The forecast's own robust fit (`lawfit.fit`, whose solver is `lawfit._minimize`, a numpy
Levenberg-Marquardt) against scipy's `least_squares` on the refits the forecast asks for,
in CI (`make test`; scipy is a dev dependency only, imported by tests/bench/fit_vs_scipy.py,
not skipped: a CI without it fails here). The agreement: its soft-L1 cost must be as low
as scipy's (median ratio <= 1.02, 90th percentile <= 1.1; on these 97 refits 1.0121 and
1.074; the full benchmark, tests/bench/fit_vs_scipy.py, 260 refits: 1.0006 and 1.019). The
median was <= 1.01 (1.0044) before the fit moved to the run's units (issue 22): the
detector then asks for other refits, harder ones, and main's solver scores 1.0122 on
these new ones too, so the bound was the problem set's, not the solver's. Both solvers
see the same map of the losses (`lawfit.fit`'s ``ref``). The multi-power law and fits
with frozen parameters have no scipy reference (scipy never did them) and are not compared."""

import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from fit_vs_scipy import captured_refits, cost_ratio, drive, scipy_fit  # noqa: E402

from wtwin.detect import lawfit  # noqa: E402


def test_the_numpy_fit_reaches_scipys_cost():
    """On the refits of seeded runs, lawfit.fit's soft-L1 cost is within the stated ratio of scipy's."""
    powers = [(2.6, 9, 0.35, 0.05), (1.0, 5, 0.6, 0.1)]
    refits = captured_refits(lambda: drive(random.Random(1), powers, (800,), 15000, 3000, 8000))
    ratios = []
    for a, k in refits:
        ours, ref = lawfit.fit(*a, **k), scipy_fit(*a, **k)
        if ours is not None and ref is not None:
            ratios.append(cost_ratio(a, ours[0], ref))
    assert len(ratios) >= 40
    assert np.median(ratios) <= 1.02 and np.percentile(ratios, 90) <= 1.1, sorted(ratios)[-5:]
