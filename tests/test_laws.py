"""The loss-curve laws: scalar prediction against the vector form, and the robust fit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wtwin.detect import forecast, lawfit, laws

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
    out = lawfit.fit(law, X, y, n, 0.05)
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
    cold = lawfit.fit("power", X, y, n, 0.05)
    warm = lawfit.fit("power", X, y, n, 0.05, p_prev=cold[0])

    def cost(q):
        r = np.sqrt(n) * (laws.evaluate("power", X, q) - y) / 0.05
        return float(np.sum(np.sqrt(1 + r * r) - 1))

    assert cost(warm[0]) <= cost(cold[0]) * (1 + 1e-9)


def test_fit_respects_the_floor_bound():
    """The floor ``c`` never exceeds the lowest bin mean (a positive loss's floor)."""
    rng = np.random.default_rng(3)
    X, y, n = _bins("power", [0.05, 1.0, 0.8, 0.0], 0.01, rng)
    q = lawfit.fit("power", X, y, n, 0.01)[0]
    assert 0.0 <= q[0] <= float(y.min())
    assert math.isfinite(q[2])


def test_too_few_bins_gives_no_fit():
    X = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    assert lawfit.fit("power", X, np.array([3.0, 2.5, 2.2]), np.ones(3), 0.1) is None


def _forecast_run(law, n=6000, seed=0):
    """(detector, learned state before the update, the update's state, S1 + 1e-12 then)
    at each update of a curve where the forecast fitted and did not refit."""
    import lr_curves as lc
    from wtwin.detect.forecast import FinetuningDetector, ForecastDetector

    if law in ("power", "exp"):
        det = ForecastDetector() if law == "power" else FinetuningDetector()
        rng = np.random.default_rng(seed)
        t = np.arange(1, n + 1)
        y = (2.6 + 9.0 * t ** -0.35 if law == "power" else 1.0 + 2.0 * np.exp(-t / 800.0))
        pts = [(int(s), float(v), None) for s, v in zip(t, y + rng.normal(0, 0.03, n))]
    else:
        det = ForecastDetector(law=law)
        eta, _, y = lc.curve(law if law == "mpl" else "tissue", "cosine", n=n, seed=seed)
        pts = [(s, v, e) for s, (e, v) in enumerate(zip(eta.tolist(), y.tolist()), 1)]
    for step, loss, lr in pts:
        before = det.snapshot()
        st = det.update(step, loss, lr)
        if st.l_pred is not None and det._fits == before["_fits"] and det._p == before["_p"]:
            yield det, before, st, det._s1 + 1e-12


@pytest.mark.parametrize("law", ["power", "exp", "schedule", "mpl"])
def test_forecast_per_update_law_is_predict_to_the_bit(law):
    """The forecast's per-update maths (`ForecastDetector._law_at`/`_mpl_at`: typed copies
    of `laws.predict`, `laws.value` and `mpl.drop`, C in the compiled build) give their
    forecast, variance and fit-to-fit disagreement exactly: l_pred, band and Q to the bit."""
    from wtwin.detect import mpl

    checked = 0
    for det, b, st, s1 in _forecast_run(law):
        p, cov, prev = b["_p"], b["_cov"], b["_prev"]
        if law == "mpl":
            c = b["_mc"]
            if c is None or det._mc != c or s1 - c[mpl.S_A] > c[mpl.DMAX]:
                continue                      # the cache was refreshed in this update
            ls1 = math.log(s1)
            e = math.exp(p[1] - p[2] * ls1)
            pred = p[0] + e - mpl.drop(c, p, s1)
            var = (laws.quad(1.0, e, -e * ls1, 0.0, cov)
                   + 2.0 * (c[mpl.V0] + e * c[mpl.V1] - e * ls1 * c[mpl.V2]) + c[mpl.CLL])
            var = var if var > 0.0 else 0.0
            dv = None if prev is None else (prev[0] + math.exp(prev[1] - prev[2] * ls1) - e
                                           - p[0] - c[mpl.DPREV])
        else:
            x = (st.step + 1.0, 0.0) if law in ("power", "exp") else (s1, det._s2)
            if law == "exp":
                x = (x[0] - 1.0, x[1])
            pred, var = laws.predict(law, x, p, cov)
            dv = None if prev is None else laws.value(law, x, prev) - pred
        reach = forecast.REACH * (b["_hi"] - b["_lo"])      # the run's range bounds it
        rlo, rhi = b["_lo"] - reach, b["_hi"] + reach
        over = rlo - pred if pred < rlo else (pred - rhi if pred > rhi else 0.0)
        pred, var = min(max(pred, rlo), rhi), var + over * over
        sw = 1.2533 * b["_noise"] + 1e-12
        mis2 = b["_misfit"] * b["_misfit"]
        u2 = var + mis2 + (dv * dv if dv is not None else 0.0)
        bz = det.band_z * math.sqrt(sw * sw + u2)
        lo = max(pred - bz, rlo, -math.inf if det._neg else 0.0)
        assert (st.l_pred, st.band_lo, st.band_hi) == (pred, lo, min(pred + bz, rhi))
        assert st.Q == (sw * sw) / (sw * sw + var + mis2 + 1e-300)
        checked += 1
    assert checked > 1000


def test_a_forecast_snapshot_from_before_the_range_restores():
    """A snapshot written before ``_lo``/``_hi``/``_neg`` existed (a store from main)
    restores: the range comes from its bins, and the forecast goes on as the live one."""
    from wtwin.detect.forecast import ForecastDetector

    det = ForecastDetector()
    rng = np.random.default_rng(3)
    pts = [(t, 2.6 + 9.0 * t ** -0.35 + float(rng.normal(0, 0.03))) for t in range(1, 4001)]
    for t, v in pts[:3000]:
        det.update(t, v)
    old = {k: v for k, v in det.snapshot().items() if k not in ("_lo", "_hi", "_neg")}
    back = det.clone()
    back.restore(old)
    means = [b[4] / b[1] for b in det._bins]
    assert (back._lo, back._hi, back._neg) == (min(means), max(means), False)
    for t, v in pts[3000:]:
        a, b = det.update(t, v), back.update(t, v)
        assert b.l_pred == pytest.approx(a.l_pred, rel=1e-3) and b.alert == a.alert
