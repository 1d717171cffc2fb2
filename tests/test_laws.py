"""The loss-curve laws: scalar prediction against the vector form, and the robust fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wtwin.detect import laws

CASES = {
    "power": ([2.5, 2.2, 0.4, 1.3], (1500.0, 0.0)),
    "exp": ([0.5, 0.7, -6.5], (900.0, 0.0)),
    "schedule": ([2.0, 1.1, 0.3, 0.8], (40.0, 0.2)),
}


@pytest.mark.parametrize("law", sorted(CASES))
def test_scalar_predict_matches_vector_form(law):
    p, x = CASES[law]
    k = laws.NPARAMS[law]
    rng = np.random.default_rng(0)
    m = rng.standard_normal((k, k))
    cov = (m @ m.T * 1e-3).tolist()
    f, J = laws._vector(law, np.array([x]), np.array(p))
    want_var = float(J[0] @ np.array(cov) @ J[0])
    got, var = laws.predict(law, x, p, cov)
    assert got == pytest.approx(float(f[0]), rel=1e-12)
    assert laws.value(law, x, p) == pytest.approx(float(f[0]), rel=1e-12)
    assert var == pytest.approx(want_var, rel=1e-9)


def _bins(law, p, noise, rng):
    steps = np.unique(np.geomspace(300, 20000, 60).round())
    X = np.column_stack([steps, 0.01 * np.sqrt(steps)])
    n = np.full(len(steps), 20.0)
    y = laws.evaluate(law, X, p) + rng.normal(0, noise / np.sqrt(n))
    return X, y, n


@pytest.mark.parametrize("law,p", [("power", [2.6, 2.5, 0.35, 2.0]),
                                   ("exp", [0.4, 1.0, -7.5]),
                                   ("schedule", [2.0, 1.5, 0.4, 0.5])])
def test_fit_recovers_the_curve_and_resists_outliers(law, p):
    rng = np.random.default_rng(1)
    X, y, n = _bins(law, p, 0.05, rng)
    y[::9] += 1.0                                    # gross outliers in a few bins
    out = laws.fit(law, X, y, n, 0.05)
    assert out is not None
    q, cov, misfit, resid_sd = out
    truth = laws.evaluate(law, X, p)
    fitted = laws.evaluate(law, X, q)
    clean = np.ones(len(y), bool)
    clean[::9] = False
    # the soft-L1 loss keeps the outliers from dragging the curve: within noise of the truth
    assert np.max(np.abs(fitted - truth)[clean]) < 0.05
    assert np.all(np.isfinite(cov)) and resid_sd > 0


def test_fit_from_a_previous_solution_stays_at_the_optimum():
    rng = np.random.default_rng(2)
    X, y, n = _bins("power", [2.6, 2.5, 0.35, 2.0], 0.05, rng)
    cold = laws.fit("power", X, y, n, 0.05)
    warm = laws.fit("power", X, y, n, 0.05, p_prev=cold[0])

    def cost(q):
        r = np.sqrt(n) * (laws.evaluate("power", X, q) - y) / 0.05
        return float(np.sum(np.sqrt(1 + r * r) - 1))

    assert cost(warm[0]) <= cost(cold[0]) * (1 + 1e-9)


def test_fit_respects_the_floor_bound():
    """The floor ``c`` never exceeds the lowest bin mean (a positive loss's floor)."""
    rng = np.random.default_rng(3)
    X, y, n = _bins("power", [0.05, 1.0, 0.8, 0.0], 0.01, rng)
    q = laws.fit("power", X, y, n, 0.01)[0]
    assert 0.0 <= q[0] <= float(y.min())
    assert math.isfinite(q[2])


def test_too_few_bins_gives_no_fit():
    X = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    assert laws.fit("power", X, np.array([3.0, 2.5, 2.2]), np.ones(3), 0.1) is None
