"""Loss-curve laws and their robust fit (scipy ``least_squares``, soft-L1 loss).

Three laws, each a function of a per-point regressor tuple ``x`` and a parameter vector:

- ``power``: ``L = c + a (t + t0)^-b`` (x = step), params ``[c, ln a, b, ln t0]``.
- ``exp``: exponential to a floor, ``L = Linf + (L0 - Linf) exp(-k t)``,
  params ``[Linf, ln(L0 - Linf), ln k]``.
- ``schedule``: Tissue et al. 2024, ``L = L0 + A S1^-alpha - C S2`` with S1 the summed
  learning rate and S2 the annealing area (momentum form), params ``[L0, ln A, alpha, C]``.

Only the fit allocates arrays, and it runs on a bounded summary; `predict` is scalar math.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

NPARAMS = {"power": 4, "exp": 3, "schedule": 4}


def _terms(law: str, x: tuple, p: list) -> tuple[float, list[float]]:
    """Value and gradient (w.r.t. params) of ``law`` at one point."""
    if law == "power":
        t0 = math.exp(p[3])
        lx = math.log(x[0] + t0)
        e = math.exp(p[1] - p[2] * lx)
        return p[0] + e, [1.0, e, -e * lx, -p[2] * e * t0 / (x[0] + t0)]
    if law == "exp":
        k = math.exp(p[2])
        e = math.exp(p[1] - k * x[0])
        return p[0] + e, [1.0, e, -e * x[0] * k]
    ls1 = math.log(x[0])
    e = math.exp(p[1] - p[2] * ls1)
    return p[0] + e - p[3] * x[1], [1.0, e, -e * ls1, -x[1]]


def value(law: str, x: tuple, p: list) -> float:
    """The law at one point (no variance)."""
    return _terms(law, x, p)[0]


def predict(law: str, x: tuple, p: list, cov: list) -> tuple[float, float]:
    """Forecast at ``x`` and its variance from the parameter covariance ``cov``."""
    f, g = _terms(law, x, p)
    n = len(g)
    var = 0.0
    for i in range(n):
        gi = g[i]
        row = cov[i]
        for j in range(n):
            var += gi * row[j] * g[j]
    return f, max(var, 0.0)


def _vector(law: str, X: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if law == "power":
        t0 = math.exp(p[3])
        xt = X[:, 0] + t0
        lx = np.log(xt)
        e = np.exp(p[1] - p[2] * lx)
        return p[0] + e, np.column_stack([np.ones_like(e), e, -e * lx, -p[2] * e * t0 / xt])
    if law == "exp":
        k = math.exp(p[2])
        e = np.exp(np.minimum(p[1] - k * X[:, 0], 700.0))
        return p[0] + e, np.column_stack([np.ones_like(e), e, -e * X[:, 0] * k])
    ls1 = np.log(X[:, 0])
    e = np.exp(p[1] - p[2] * ls1)
    return p[0] + e - p[3] * X[:, 1], np.column_stack([np.ones_like(e), e, -e * ls1, -X[:, 1]])


def evaluate(law: str, X: np.ndarray, p) -> np.ndarray:
    """The law at each row of ``X``."""
    return _vector(law, X, np.asarray(p, float))[0]


def _start(law: str, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo_y, span = float(y.min()), float(np.ptp(y)) + 1e-9
    floor = 0.0 if lo_y > 0 else lo_y - 3 * span     # positive losses: the floor is >= 0
    c0 = max(lo_y - 0.2 * span, floor + 0.5 * (lo_y - floor))
    if law == "exp":
        k0 = 3.0 / max(float(X[-1, 0] - X[0, 0]), 1.0)
        p0 = [c0, math.log(max(y[0] - c0, 1e-9)) + k0 * X[0, 0], math.log(k0)]
        lb, ub = [floor, -50.0, -30.0], [lo_y, 50.0, 5.0]
    else:
        b0 = 0.5
        p0 = [c0, math.log(max(y[0] - c0, 1e-9)) + b0 * math.log(X[0, 0]), b0]
        lb, ub = [floor, -50.0, 1e-3], [lo_y, 80.0, 4.0]
        if law == "power":
            p0[1] += b0 * math.log(1.0 + 1.0 / X[0, 0])
            p0.append(0.0)
            lb.append(-5.0)
            ub.append(math.log(10.0 * float(X[-1, 0])))
        if law == "schedule":
            p0.append(0.0)
            lb.append(0.0)
            ub.append(np.inf)
    return np.array(p0), np.array(lb), np.array(ub)


def fit(law: str, X: np.ndarray, y: np.ndarray, n: np.ndarray, scale: float,
        p_prev: list | None = None) -> tuple[list, list, float, float] | None:
    """Robust weighted fit of bin means ``y`` (counts ``n``) at regressors ``X``.

    Returns ``(params, covariance, misfit_sd, resid_sd)`` or None when it cannot fit.
    ``misfit_sd`` is the spread of bin means around the law beyond what point noise
    explains; ``resid_sd`` the robust per-point residual scale.
    """
    k = NPARAMS[law]
    if len(y) < k + 3:
        return None
    w = np.sqrt(n)
    p0, lb, ub = _start(law, X, y)
    if p_prev is not None:
        hi = ub.copy()
        fin = np.isfinite(ub)
        hi[fin] = ub[fin] - 1e-12 * np.abs(ub[fin])
        p0 = np.clip(np.asarray(p_prev, float), lb, hi)
        p0[0] = min(p0[0], ub[0] - 1e-9 * (1 + abs(ub[0])))

    cache = {}

    def fun(p):
        f, J = _vector(law, X, p)
        cache["J"] = J
        return w * (f - y)

    def jac(p):
        return w[:, None] * cache["J"]

    try:
        res = least_squares(fun, p0, jac=jac, bounds=(lb, ub), loss="soft_l1",
                            f_scale=max(scale, 1e-12), max_nfev=15 if p_prev is not None else 60,
                            x_scale="jac", ftol=1e-6, xtol=1e-6, gtol=1e-6)
    except (ValueError, FloatingPointError, np.linalg.LinAlgError):
        return None
    if not np.all(np.isfinite(res.x)):
        return None
    r = res.fun
    resid_sd = 1.4826 * float(np.median(np.abs(r - np.median(r)))) + 1e-12
    J = res.jac
    try:
        cov = np.linalg.pinv(J.T @ J) * resid_sd ** 2 * len(y) / max(len(y) - k, 1)
    except np.linalg.LinAlgError:
        return None
    raw = r / w
    mis = float(np.median(raw ** 2)) / 0.4549 - float(np.median(scale ** 2 / n))
    return res.x.tolist(), cov.tolist(), math.sqrt(max(mis, 0.0)), resid_sd
