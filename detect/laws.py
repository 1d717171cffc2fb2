"""Loss-curve laws and their robust fit (bounded Levenberg-Marquardt, soft-L1 loss).

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

The fit is affine-invariant in the loss: `fit` maps the losses to ``(y - level) / scale``
(``ref``: the forecast passes the lowest and the range of what the run has shown), fits
there, and maps the parameters and their covariance back (`to_raw`), so a loss logged
x100 or +1000 gets the same fit up to the transform. The floor of the law (``c``,
``Linf``, ``L0``) is bounded below by ``FLOOR`` x that range under the lowest bin,
not by zero (zero is not invariant under an offset).

Only the fit allocates arrays, and it runs on a bounded summary (~60 bins) with numpy
alone: a few hundred microseconds, where scipy's general ``least_squares`` took several
milliseconds and its import most of a second. `predict` is scalar math.

The module is over the house's ~300 lines on purpose: each law is written out three
times (`value`/`predict` scalar on every update, `_vector` with its Jacobian for the fit,
`_start` for the start point) and those must change together; the fit (`fit`,
`_minimize`) is checked against scipy by tests/test_fit_vs_scipy.py.
"""

from __future__ import annotations

import math

import numpy as np

NPARAMS = {"power": 4, "exp": 3, "schedule": 4, "mpl": 7}
# cost evaluations and initial Marquardt damping of a fit: cold (cautious first steps) and
# warm, from the last fit's solution (nearly Gauss-Newton)
COLD, WARM = (60, 1.0), (8, 1e-3)
MPL_COLD, MPL_WARM = 100, 40
# mpl: sd of the weak prior on the drop's shape [ln C, beta, gamma], centred on the start
PRIOR_SD = np.array([4.0, 0.5, 0.5])
# the covariance's pseudo-inverse: directions below this x the largest eigenvalue (of the
# equilibrated J^T J) are the fit's null space
RCOND = 1e-10
# the floor parameter's lower bound: this x the loss's range (``ref``) under the lowest bin
FLOOR = 1.0
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


def _quad(g0: float, g1: float, g2: float, g3: float, c: list) -> float:
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
        var = _quad(1.0, e, -e * lx, -p[2] * e * t0 / xt, cov)
    elif law == "exp":
        k = math.exp(p[2])
        e = math.exp(p[1] - k * x[0])
        var = _quad(1.0, e, -e * x[0] * k, 0.0, cov)
    else:
        ls1 = math.log(x[0])
        e = math.exp(p[1] - p[2] * ls1)
        var = _quad(1.0, e, -e * ls1, -x[1], cov)
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


def _start(law: str, X: np.ndarray, y: np.ndarray, aux=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The start and the box, for losses in units of the run's range (`fit`'s ``ref``)."""
    lo_y, span = float(y.min()), float(np.ptp(y)) + 1e-9
    floor = lo_y - FLOOR                 # FLOOR x the run's range under the lowest bin
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
        if law == "mpl":      # B = 0: no loss drop until the data show one (never a false rise)
            le = 0.0 if aux is None or len(aux[0]) == 0 else float(
                np.average(aux[1], weights=np.abs(aux[0]) + 1e-300))
            # C such that G's knee lies at 5% of the last S1 for the typical bucket's eta
            lc0 = math.log(20.0 / max(float(X[-1, 0]), 1e-12)) + 0.5 * le
            p0 += [0.0, lc0, 0.5, 0.5]
            lb += [0.0, lc0 - 15.0, 0.05, 0.0]
            ub += [np.inf, lc0 + 10.0, 3.0, 1.5]
    return np.array(p0), np.array(lb), np.array(ub)


def start_point(law: str, X: np.ndarray, y: np.ndarray, p_prev: list | None = None, aux=None):
    """``(p0, lb, ub)``: the cold start of `_start`, or ``p_prev`` moved strictly inside
    the box (a warm start from the last fit)."""
    p0, lb, ub = _start(law, X, y, aux)
    if p_prev is not None:
        hi = ub.copy()
        fin = np.isfinite(ub)
        hi[fin] = ub[fin] - 1e-12 * np.abs(ub[fin])
        p0 = np.clip(np.asarray(p_prev, float), lb, hi)
        p0[0] = min(p0[0], ub[0] - 1e-9 * (1 + abs(ub[0])))
    return p0, lb, ub


def fit(law: str, X: np.ndarray, y: np.ndarray, n: np.ndarray, scale: float,
        p_prev: list | None = None, aux=None, freeze: tuple = (),
        lr_peak: float | None = None, ref: tuple | None = None) -> tuple[list, list, float, float] | None:
    """Robust weighted fit of bin means ``y`` (counts ``n``) at regressors ``X``.

    ``ref = (level, range)``: the fit runs on ``(y - level) / range`` and answers in the
    units of ``y`` (`to_raw`); the forecast passes the lowest loss the run has shown and
    its range. Without it, the lowest of ``y`` and its spread.

    Returns ``(params, covariance, misfit_sd, resid_sd)`` or None when it cannot fit.
    ``misfit_sd`` is the spread of bin means around the law beyond what point noise
    explains; ``resid_sd`` the robust per-point residual scale. ``aux``: the LR-change
    buckets of the ``mpl`` law; ``freeze``: indices of parameters held at their start;
    ``lr_peak``: the largest LR, which bounds ``mpl``'s B (annealing the LR to zero cannot
    take more than the loss itself: ``B lr_peak <= max |y|``).
    """
    k = NPARAMS[law]
    if len(y) < k + 3:
        return None
    level, unit = ref if ref is not None else (float(y.min()), float(np.ptp(y)))
    if not (unit > 0.0 and math.isfinite(unit) and math.isfinite(level)):
        level, unit = 0.0, 1.0           # a flat or degenerate run: no map
    out = _fit(law, X, (y - level) / unit, n, scale / unit,
               None if p_prev is None else to_unit(law, p_prev, level, unit), aux, freeze, lr_peak)
    if out is None:
        return None
    p, cov, misfit, resid_sd = out
    return (to_raw(law, p.tolist(), level, unit), _cov_to_raw(law, cov, unit).tolist(),
            misfit * unit, resid_sd * unit)


def _fit(law, X, y, n, scale, p_prev, aux, freeze, lr_peak):
    """`fit` in the run's units (losses mapped by ``ref``)."""
    k = NPARAMS[law]
    w = np.sqrt(n)
    p0, lb, ub = start_point(law, X, y, p_prev, aux)
    budget = WARM if p_prev is not None else COLD
    frozen = list(freeze)
    if law == "mpl":
        if aux is not None and len(aux[0]):
            aux = _mpl_aux(X, aux)
        if aux is None or len(aux[0]) == 0:
            frozen = [3, 4, 5, 6]        # no LR change yet: no drop to fit
        elif 4 not in frozen:            # three parameters inside G: more evaluations
            budget = (MPL_WARM, budget[1]) if p_prev is not None else (MPL_COLD, budget[1])
    ny, yf, wf = len(y), y, w
    if law == "mpl" and aux is not None and len(aux[0]):
        start = _start(law, X, y, aux)[0][4:]
        if 4 in frozen:                   # the drop's shape not yet fitted: the cold start
            p0[4:] = start
            q = p0.tolist()
            q[3] = 1.0
            aux[7] = -(_mpl(X, q, False, aux) - _mpl(X, q, False, None))   # G @ D
        else:                             # weak prior on the shape: one bin's worth each
            aux[5], aux[6] = start, max(scale, 1e-12) / PRIOR_SD
            yf, wf = np.concatenate([y, np.zeros(3)]), np.concatenate([w, np.ones(3)])
    if law == "mpl" and lr_peak:          # no deeper than the floor: B lr_peak <= max y - floor
        ub[3] = max(float(y.max()) - lb[0], 1e-12) / lr_peak
        p0[3] = min(p0[3], ub[3])
    if frozen:                            # held at the start (the last fit's values)
        lb[frozen] = ub[frozen] = p0[frozen]
    p = _minimize(law, X, yf, wf, max(scale, 1e-12), p0, lb, ub, *budget, aux=aux)
    if p is None:
        return None
    f, J = _vector(law, X, p, aux=aux)
    if frozen:
        J[:, frozen] = 0.0                # known, not estimated: no variance
    rf = wf * (f - yf)
    J = J * (wf * (1.0 + (rf / max(scale, 1e-12)) ** 2) ** -0.75)[:, None]  # robust-loss Jacobian
    r, f = rf[:ny], f[:ny]
    resid_sd = 1.4826 * _median(np.abs(r - _median(r))) + 1e-12
    try:
        cov = _pinv(J.T @ J) * resid_sd ** 2 * len(y) / max(len(y) - k, 1)
    except np.linalg.LinAlgError:
        return None
    raw = r / w
    mis = _median(raw ** 2) / 0.4549 - scale ** 2 * _median(1.0 / n)
    return p, cov, math.sqrt(max(mis, 0.0)), resid_sd


def _pinv(A: np.ndarray) -> np.ndarray:
    """Pseudo-inverse of the symmetric ``J^T J``, equilibrated to a unit diagonal first and
    cut at ``RCOND`` of its largest eigenvalue: a degenerate fit (parameters traded
    against each other, frozen ones as zero columns) gets no variance along its null
    directions, where a plain inverse returned round-off of either sign (1e13, BLAS
    dependent). A well-conditioned one (``1 / trace(E^-1)``, under its smallest
    eigenvalue, above ``RCOND`` x ``n``, over its largest) is inverted directly: the same
    result, a fifth of the cost."""
    d = A.diagonal()
    full = float(d.min()) > 0.0
    r = 1.0 / np.sqrt(d) if full else np.where(d > 0.0, 1.0 / np.sqrt(np.where(d > 0.0, d, 1.0)), 0.0)
    rr = r[:, None] * r
    E = A * rr
    if full:
        try:
            inv = np.linalg.inv(E)
            di = inv.diagonal()
            if di.min() > 0.0 and 1.0 / float(di.sum()) > RCOND * len(d):
                return inv * rr
        except np.linalg.LinAlgError:
            pass
    w, V = np.linalg.eigh(E)
    keep = w > RCOND * w[-1]
    Vk = V[:, keep]
    return ((Vk / w[keep]) @ Vk.T) * rr


def _median(a: np.ndarray) -> float:
    """Median of a small 1-d array (``np.median`` costs ten times more at this size)."""
    s = np.sort(a)
    m = len(s) // 2
    return float(s[m]) if len(s) % 2 else 0.5 * float(s[m - 1] + s[m])


def _cost(law: str, X: np.ndarray, y: np.ndarray, w: np.ndarray, s: float, p: np.ndarray,
          aux=None):
    """Soft-L1 cost ``s^2 sum(sqrt(1 + (r/s)^2) - 1)`` of ``p`` and its residuals ``r``."""
    r = w * (_vector(law, X, p, jac=False, aux=aux) - y)
    z = r * (1.0 / s)
    return s * s * (float(np.sqrt(z * z + 1.0).sum()) - len(r)), r


def _minimize(law: str, X: np.ndarray, y: np.ndarray, w: np.ndarray, s: float,
              p0: np.ndarray, lb: np.ndarray, ub: np.ndarray, max_nfev: int,
              lam: float, aux=None) -> np.ndarray | None:
    """Levenberg-Marquardt on the soft-L1 cost, with the box [lb, ub] as an active set.

    The Gauss-Newton model uses the robust loss's exact curvature along each residual
    (Triggs et al.'s correction, as scipy's ``least_squares`` does): gradient
    ``J^T rho' r``, Hessian ``J^T (rho' + 2 z rho'') J`` with ``z = (r/s)^2``. Damping is
    Marquardt's (the diagonal, starting at ``lam``), so the parameters' scales do not
    matter; Nielsen's rule adapts it. A parameter at a bound whose gradient points out of
    the box is held there for the step.
    """
    p = np.minimum(np.maximum(p0, lb), ub)
    lbl, ubl, k = lb.tolist(), ub.tolist(), len(p)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        c, r = _cost(law, X, y, w, s, p, aux)
        if not math.isfinite(c):
            return None
        nu, nfev = 2.0, 1
        while nfev < max_nfev:
            J = _vector(law, X, p, aux=aux)[1]
            z = r * (1.0 / s)
            q = z * z + 1.0
            h = q ** -0.75
            Z = np.empty((len(r), k + 1))    # [J h | r h q]: one product gives A and g
            np.multiply(J, (w * h)[:, None], out=Z[:, :k])
            Z[:, k] = r * (h * q)
            AA = Z.T @ Z
            A, g = AA[:k, :k], AA[:k, k]   # J^T (rho'+2z rho'') J and J^T rho' r
            pl, gl = p.tolist(), g.tolist()
            free = [not ((pl[i] <= lbl[i] and gl[i] > 0) or (pl[i] >= ubl[i] and gl[i] < 0))
                    for i in range(k)]
            if all(free):
                Af, gf, fidx = A, g, None
            elif any(free):
                fidx = [i for i in range(k) if free[i]]
                Af, gf = A[np.ix_(fidx, fidx)], g[fidx]
            else:
                break
            d = Af.diagonal()
            d = np.maximum(d, 1e-12 * (1.0 + float(d.max())))
            stride = len(d) + 1
            while nfev < max_nfev:
                M = Af.copy()
                M.flat[::stride] += lam * d
                try:
                    step = np.linalg.solve(M, -gf)
                except np.linalg.LinAlgError:
                    lam *= 10.0
                    continue
                if fidx is None:
                    pn = p + step
                else:
                    pn = p.copy()
                    pn[fidx] += step
                pn = np.minimum(np.maximum(pn, lb), ub)
                cn, rn = _cost(law, X, y, w, s, pn, aux)
                nfev += 1
                if cn < c:                 # False for nan
                    predicted = -float(step @ gf) - 0.5 * float(step @ (Af @ step))
                    rho = (c - cn) / max(predicted, 1e-300)
                    lam *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                    nu = 2.0
                    break
                lam, nu = lam * nu, nu * 2.0
            else:
                break
            dp = pn - p
            dc = c - cn
            p, c, r = pn, cn, rn
            if (dc <= 1e-6 * c and rho > 0.25) or float(dp @ dp) <= 1e-12 * (1e-6 + float(p @ p)):
                break
    return p if np.all(np.isfinite(p)) else None
