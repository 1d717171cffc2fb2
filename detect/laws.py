"""Loss-curve laws: their values and variances (`value`, `predict`: scalar math, every
update), their vector form with its Jacobian (`_vector`, `evaluate`: the fit's), and the
map of their parameters between the run's units and the loss's (`to_raw`, `to_unit`).

Three laws, each a function of a per-point regressor tuple ``x`` and a parameter vector:

- ``power``: ``L = c + a (t + t0)^-b`` (x = step), params ``[c, ln a, b, ln t0]``.
- ``exp``: exponential to a floor, ``L = Linf + (L0 - Linf) exp(-k t)``,
  params ``[Linf, ln(L0 - Linf), ln k]``.
- ``schedule``: Tissue et al. 2024, ``L = L0 + A S1^-alpha - C S2`` with S1 the summed
  learning rate and S2 the annealing area (momentum form), params ``[L0, ln A, alpha, C]``.
- ``mpl``: Luo et al. 2025's multi-power law, ``L = L0 + A S1^-alpha - LD`` with
  ``LD = B sum_j D_j (1 - (1 + C eta_j^-gamma (S1 - s_j))^-beta)`` over the buckets of LR
  changes ``(D_j, ln eta_j, s_j)`` of `mpl` (passed as ``aux``), params
  ``[L0, ln A, alpha, B, ln C, beta, gamma]``. Its per-step prediction is cached (`mpl.anchor`).

`lawfit` fits them. A law is written out three times (`value`/`predict` here, `_vector`
here with its Jacobian, `lawfit._start` for its start point): those change together.
"""

from __future__ import annotations

import math

import numpy as np

NPARAMS = {"power": 4, "exp": 3, "schedule": 4, "mpl": 7}
# parameters that scale with the loss (besides the floor, shifted and scaled, and ln A, shifted)
_SCALED = {"power": (), "exp": (), "schedule": (3,), "mpl": (3,)}


def to_raw(law: str, p: list, level: float, scale: float) -> list:
    """Parameters fitted to ``(y - level) / scale``, as parameters of ``y``."""
    q = list(p)
    q[0] = level + scale * q[0]
    q[1] += math.log(scale)
    for i in _SCALED[law]:
        q[i] *= scale
    return q


def to_unit(law: str, p: list, level: float, scale: float) -> list:
    """`to_raw`'s inverse: parameters of ``y`` as parameters of ``(y - level) / scale``."""
    q = list(p)
    q[0] = (q[0] - level) / scale
    q[1] -= math.log(scale)
    for i in _SCALED[law]:
        q[i] /= scale
    return q


def _cov_to_raw(law: str, cov: np.ndarray, scale: float) -> np.ndarray:
    d = np.ones(len(cov))
    d[0] = scale
    for i in _SCALED[law]:
        d[i] = scale
    return cov * np.outer(d, d)


def value(law: str, x: tuple, p: list) -> float:
    """The law at one point (no variance)."""
    if law == "power":
        return p[0] + math.exp(p[1] - p[2] * math.log(x[0] + math.exp(p[3])))
    if law == "exp":
        return p[0] + math.exp(p[1] - math.exp(p[2]) * x[0])
    return p[0] + math.exp(p[1] - p[2] * math.log(x[0])) - p[3] * x[1]


def quad(g0: float, g1: float, g2: float, g3: float, c: list) -> float:
    """``g C g`` for a symmetric 4x4 ``C`` (3x3 when ``g3`` is unused: pass 0.0)."""
    r0, r1, r2 = c[0], c[1], c[2]
    v = (g0 * g0 * r0[0] + g1 * g1 * r1[1] + g2 * g2 * r2[2]
         + 2.0 * (g0 * g1 * r0[1] + g0 * g2 * r0[2] + g1 * g2 * r1[2]))
    if g3:
        r3 = c[3]
        v += g3 * g3 * r3[3] + 2.0 * g3 * (g0 * r0[3] + g1 * r1[3] + g2 * r2[3])
    return v


def predict(law: str, x: tuple, p: list, cov: list) -> tuple[float, float]:
    """Forecast at ``x`` and its variance from the parameter covariance ``cov``.

    Scalar math with the gradient written out per law: this runs on every update.
    """
    if law == "power":
        t0 = math.exp(p[3])
        xt = x[0] + t0
        lx = math.log(xt)
        e = math.exp(p[1] - p[2] * lx)
        var = quad(1.0, e, -e * lx, -p[2] * e * t0 / xt, cov)
    elif law == "exp":
        k = math.exp(p[2])
        e = math.exp(p[1] - k * x[0])
        var = quad(1.0, e, -e * x[0] * k, 0.0, cov)
    else:
        ls1 = math.log(x[0])
        e = math.exp(p[1] - p[2] * ls1)
        var = quad(1.0, e, -e * ls1, -x[1], cov)
        return p[0] + e - p[3] * x[1], max(var, 0.0)
    return p[0] + e, max(var, 0.0)


def _vector(law: str, X: np.ndarray, p, jac: bool = True, aux=None):
    """The law at each row of ``X`` and, if ``jac``, its Jacobian (one row per point)."""
    p = p.tolist() if isinstance(p, np.ndarray) else p   # Python floats: cheaper scalar math
    if law == "mpl":
        return _mpl(X, p, jac, aux)
    if law == "power":
        t0 = math.exp(p[3])
        xt = X[:, 0] + t0
        lx = np.log(xt)
        e = np.exp(p[1] - p[2] * lx)
        if not jac:
            return e + p[0]
        J = np.empty((len(e), 4))
        J[:, 0] = 1.0
        J[:, 1] = e
        J[:, 2] = -e * lx
        J[:, 3] = e * (-p[2] * t0) / xt
        return e + p[0], J
    if law == "exp":
        k = math.exp(p[2])
        e = np.exp(np.minimum(p[1] - k * X[:, 0], 700.0))
        if not jac:
            return e + p[0]
        J = np.empty((len(e), 3))
        J[:, 0] = 1.0
        J[:, 1] = e
        J[:, 2] = -k * e * X[:, 0]
        return e + p[0], J
    ls1 = np.log(X[:, 0])
    e = np.exp(p[1] - p[2] * ls1)
    f = e + p[0] - p[3] * X[:, 1]
    if not jac:
        return f
    J = np.empty((len(e), 4))
    J[:, 0] = 1.0
    J[:, 1] = e
    J[:, 2] = -e * ls1
    J[:, 3] = -X[:, 1]
    return f, J


def _mpl_aux(X: np.ndarray, aux):
    """The fit's ``aux``: ``(D, lneta, s, ages, X, prior centre, prior weight, G @ D)``, the
    bins-by-buckets ages precomputed (the same at every evaluation of a fit), without
    the buckets no bin comes after; the last three are filled in by `fit`."""
    D, le, s = aux[:3]
    keep = s < float(X[:, 0].max())
    D, le, s = D[keep], le[keep], s[keep]
    return [D, le, s, np.maximum(X[:, :1] - s[None, :], 0.0), X, None, None, None]


def _mpl(X: np.ndarray, p: list, jac: bool, aux):
    """Multi-power law at bins ``X[:, 0]`` (= S1) over buckets ``aux = (D, lneta, s)``."""
    S = X[:, 0]
    ls1 = np.log(S)
    e = np.exp(p[1] - p[2] * ls1)
    B, beta, gam = p[3], p[5], p[6]
    k = len(S)
    own = aux is not None and len(aux) == 8 and aux[4] is X     # the fit's own aux
    G = None
    if aux is None or len(aux[0]) == 0:
        f = e + p[0]
    elif own and aux[7] is not None:                   # the shape held: G @ D is fixed
        gb = aux[7]
        f = e + p[0] - B * gb
    else:
        D, le, s = aux[:3]
        a = np.exp(p[4] - gam * le)                    # C eta_j^-gamma, one per bucket
        age = aux[3] if own else np.maximum(S[:, None] - s[None, :], 0.0)
        u = 1.0 + a * age
        lu = np.log(u)
        w = np.exp(-beta * lu)                         # (1 + a age)^-beta
        G = 1.0 - w
        gb = G @ D                                     # dLD/dB
        f = e + p[0] - B * gb
    prior = own and aux[5] is not None
    if prior:
        f = np.concatenate([f, aux[6] * (np.array(p[4:]) - aux[5])])
    if not jac:
        return f
    J = np.zeros((k + 3 if prior else k, 7))
    J[:k, 0] = 1.0
    J[:k, 1] = e
    J[:k, 2] = -e * ls1
    if own and aux[7] is not None:
        J[:k, 3] = -gb
    elif G is not None:
        q = (beta * w / u) * (a * age)                 # dG/dln C
        J[:k, 3] = -gb
        J[:k, 4] = -B * (q @ D)
        J[:k, 5] = -B * ((w * lu) @ D)
        J[:k, 6] = B * (q @ (D * le))
    if prior:
        J[k + np.arange(3), 4 + np.arange(3)] = aux[6]
    return f, J


def evaluate(law: str, X: np.ndarray, p, aux=None) -> np.ndarray:
    """The law at each row of ``X``."""
    return _vector(law, X, np.asarray(p, float), jac=False, aux=aux)
