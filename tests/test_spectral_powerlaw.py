"""The pruned KS scan of ``powerlaw._first_min_ks`` against the plain O(n^2) scan.

The fast engine does not compute every candidate's KS distance: it evaluates exactly
only the candidates whose lower bound could still win. These tests check that this
picks the same ``xmin`` index (first minimum) and the same ``D`` as computing all of
them, the way weightwatcher's ``WWFit.fit_power_law_standard`` does, on spectra of
every shape the engine meets: heavy tails, Marchenko-Pastur bulks, ties, plateaus.
"""

from __future__ import annotations

import numpy as np
import pytest

from wtwin.daemon.spectral import powerlaw


def _all_ds(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate's alpha and D, one candidate at a time (weightwatcher's loop)."""
    logs = np.log(data)
    m = data.size - 1
    alphas, ds = np.zeros(m), np.ones(m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(m):
            n = float(data.size - i)
            alphas[i] = 1 + n / (np.sum(logs[i:]) - n * logs[i])
            if alphas[i] > 1:
                ds[i] = np.max(np.abs(1 - (data[i:] / data[i]) ** (1 - alphas[i]) - np.arange(n) / n))
    return alphas, ds


def _spectra():
    rng = np.random.default_rng(11)
    for df in (1.5, 2.5, 4.0, 8.0):
        w = rng.standard_t(df, size=(600, 200))
        yield f"student-t df={df}", np.linalg.eigvalsh(w.T @ w)
    for q in (1.0, 2.0, 4.0):  # Marchenko-Pastur bulk: alpha far above 6
        w = rng.standard_normal((int(300 * q), 300))
        yield f"gaussian q={q}", np.linalg.eigvalsh(w.T @ w)
    yield "pareto", rng.pareto(1.8, 3000) + 1.0
    yield "ties", np.repeat(rng.pareto(2.0, 60) + 1.0, 5)
    yield "plateau top", np.concatenate([rng.uniform(1, 2, 200), np.full(30, 50.0)])
    yield "two values", np.array([1.0] * 25 + [2.0] * 25)
    yield "uniform", rng.uniform(0.1, 10.0, 500)


@pytest.mark.parametrize("name,evals", list(_spectra()), ids=lambda v: v if isinstance(v, str) else "")
def test_pruned_scan_picks_the_plain_scans_first_minimum(name, evals):
    data = np.sort(evals[evals > powerlaw.EVALS_THRESH])
    alphas, ds = _all_ds(data)
    want = int(np.argmin(ds))
    logs = np.log(data)
    n = (data.size - np.arange(data.size - 1)).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        suffix = np.cumsum(logs[::-1])[::-1]
        i, alpha, d = powerlaw._first_min_ks(logs, 1.0 + n / (suffix[:-1] - n * logs[:-1]))
    assert d == pytest.approx(ds[want], abs=1e-12), name
    assert i == want or ds[i] - ds[want] <= 1e-12, (name, i, want)  # only an ulp-level tie may differ
    assert alpha == pytest.approx(alphas[i], rel=1e-12, abs=1e-12) or alpha == alphas[i]


def test_fit_uses_the_scan_and_counts_spikes():
    rng = np.random.default_rng(3)
    x = np.sort(rng.pareto(2.0, 800) + 1.0)
    fit = powerlaw.fit_power_law(x)
    alphas, ds = _all_ds(x)
    i = int(np.argmin(ds))
    assert fit.ok and fit.xmin == x[i] and fit.num_pl_spikes == x.size - i
    assert fit.alpha == pytest.approx(alphas[i], abs=1e-9) and fit.D == pytest.approx(ds[i], abs=1e-12)


def test_no_valid_candidate_is_a_failed_fit():
    assert not powerlaw.fit_power_law(np.full(40, 3.0)).ok
