"""The robust fit of a law of `laws` (bounded Levenberg-Marquardt, soft-L1 loss).

The fit is affine-invariant in the loss: `fit` maps the losses to ``(y - level) / scale``
(``ref``: the forecast passes the lowest and the range of what the run has shown), fits
there, and maps the parameters and their covariance back (`to_raw`), so a loss logged
x100 or +1000 gets the same fit up to the transform. The floor of the law (``c``,
``Linf``, ``L0``) is bounded below by ``FLOOR`` x that range under the lowest bin,
not by zero (zero is not invariant under an offset).

Only the fit allocates arrays, and it runs on a bounded summary (~60 bins) with numpy
alone: a few hundred microseconds, where scipy's general ``least_squares`` took several
milliseconds and its import most of a second. The fit (`fit`, `_minimize`) is checked
against scipy by tests/test_fit_vs_scipy.py.
"""

from __future__ import annotations

import math

import numpy as np

from .laws import NPARAMS, _cov_to_raw, _mpl, _mpl_aux, _vector, to_raw, to_unit

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
