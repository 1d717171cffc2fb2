"""The multi-power law's loss-drop term over a bounded summary of the LR schedule.

Luo et al. 2025: ``LD(t) = B sum_k (eta_{k-1} - eta_k) G(eta_k^-gamma S_k(t))`` with
``S_k(t) = S1(t) - S1(k-1)`` and ``G(x) = 1 - (C x + 1)^-beta``. The sum runs over every
LR change after warm-up (the first rising phase, whose area stays in S1, as the paper's
``S_W``): decreases add to the drop, increases (warm restarts) subtract from it, signed as
the paper's form is written, so long after a restart to the peak LR the drop is gone.

The detector keeps no LR history. Small changes of one sign first gather in a pending
group (up to ``PEND_MAX`` of them, within ``PEND_TOL`` of the group's first LR: a few sums
per step, no log), which joins the buckets as one change (not yet in the forecast while
pending). Each change goes into a **bucket** (signed sum ``D`` of the changes, and their
``|change|``-weighted mean of ``ln eta`` and of ``s = S1(k-1)``); a bucket takes changes
of one sign while they stay within ``ETA_TOL`` in ``ln eta`` and ``SPAN_TOL`` x S1 in
span. Past ``MAXB`` buckets the adjacent pair whose merge costs least (span over age,
plus the ``ln eta`` gap) is merged: old buckets coarsen, as G flattens with age. ``LD``
is then ``B sum_j D_j G(C e^(-gamma ln eta_j) max(S1 - s_j, 0))``.

Per step the value comes from a cache (`anchor`, a plain list): the buckets' sum, its
first two derivatives in S1 and its parameter gradient at an anchor S1 (numpy, once per
refresh), a second-order Taylor step from there, plus the changes made since the anchor
through G's second-order expansion at 0 (five running sums). It is refreshed on a refit
and when S1 has moved past ``STEP`` of the nearest bucket's scale in S1 (``1/a + age``),
so per update it is scalar math, and the refresh's numpy cost is amortized.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

MAXB = 40          # buckets kept
ETA_TOL = 0.05     # ln eta spread of a bucket as it fills
SPAN_TOL = 0.01    # S1 span of a bucket as it fills, relative to S1
STEP = 0.2         # Taylor step allowed, as a fraction of the nearest bucket's S1 scale,
STEP_MAX = 0.5     # ... or this when the third-order terms stay below ``tol`` even so
TOL_NOISE = 0.01   # the detector's ``tol``: this fraction of the residual noise
PEND_MAX, PEND_TOL = 32, 0.01   # the detector gathers up to 32 small changes within 1% of LR

# bucket: [D (signed sum of changes), W (sum of |change|), sum |c| ln eta, sum |c| s,
#          s of the first change, s of the last change, ln eta of the first change]


def add(bk: list, delta: float, le: float, s: float, s_ref: float) -> None:
    """Add the change ``delta = eta_{k-1} - eta_k`` (``le = ln eta_k``, ``s = S1(k-1)``;
    or a group of changes of one sign: their sum, weighted means of ``ln eta`` and ``s``);
    ``s_ref`` is the S1 of the oldest point a fit still uses (merge costs count age from
    there)."""
    w = delta if delta > 0.0 else -delta
    if bk:
        b = bk[-1]
        if (b[0] > 0.0) == (delta > 0.0) and -ETA_TOL <= le - b[6] <= ETA_TOL \
                and s - b[4] <= SPAN_TOL * s:
            b[0] += delta
            b[1] += w
            b[2] += w * le
            b[3] += w * s
            b[5] = s
            return
    bk.append([delta, w, w * le, w * s, s, s, le])
    if len(bk) > MAXB:
        _merge(bk, s_ref)


def _merge(bk: list, s_ref: float) -> None:
    best, at = math.inf, 0
    for i in range(len(bk) - 2):            # never the open (last) bucket
        b, c = bk[i], bk[i + 1]
        span = c[5] - b[4]
        age = max(s_ref - c[5], 2.0 * SPAN_TOL * b[4], 1e-300)
        cost = span / age + abs(b[2] / b[1] - c[2] / c[1])
        if (b[0] > 0.0) != (c[0] > 0.0):
            cost += 1.0
        if cost < best:
            best, at = cost, i
    b, c = bk[at], bk.pop(at + 1)
    b[0] += c[0]
    b[1] += c[1]
    b[2] += c[2]
    b[3] += c[3]
    b[5] = c[5]


def arrays(bk: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(D, ln eta, s)`` of the buckets, the ``aux`` of ``lawfit.fit("mpl", ...)``."""
    m = len(bk)
    a = np.fromiter(chain.from_iterable(bk), float, 7 * m).reshape(m, 7)
    return a[:, 0], a[:, 2] / a[:, 1], a[:, 3] / a[:, 1]


# cache layout
S_A, LD, L1, L2, DMAX, V0, V1, V2, CLL, DPREV, Q1, Q1S, Q2, Q2S, Q2SS, TOL = range(16)


def anchor(bk: list, p: list, cov: list, prev: list | None, s1: float, tol: float) -> list:
    """A fresh cache at ``S1 = s1`` for parameters ``p`` (and the previous fit's ``prev``).

    Its reach: ``STEP`` x the nearest bucket's S1 scale, or ``STEP_MAX`` x when the
    Taylor step's third-order terms, at most ``B sum|D| beta (beta+1) (beta+2) / 6 r^3``
    for a step of ``r`` scales, stay below ``tol`` (loss units) even so."""
    B, lc, beta, gam = p[3], p[4], p[5], p[6]
    ld = l1 = l2 = gb = gc = gbe = gg = dprev = 0.0
    dmax = 0.1 * s1
    if bk:
        D, le, s = arrays(bk)
        m = len(D)
        a = np.exp(lc - gam * le)
        age = np.maximum(s1 - s, 0.0)
        u = 1.0 + a * age
        lu = np.log(u)
        w = np.exp(-beta * lu)
        wu = beta * w / u * (age > 0.0)                 # dG/dS1 / a
        q = wu * a * age
        R = np.empty((7 if prev is not None else 6, m))
        R[0] = 1.0 - w
        R[1] = wu * a
        R[2] = R[1] * ((beta + 1.0) / u * a)
        R[3] = q
        R[4] = w * lu
        R[5] = q * le
        if prev is not None:
            R[6] = 1.0 - (1.0 + np.exp(prev[4] - prev[6] * le) * age) ** -prev[5]
        r = (R @ D).tolist()
        gb = r[0]
        ld, l1, l2 = B * r[0], B * r[1], -B * r[2]
        gc, gbe, gg = B * r[3], B * r[4], -B * r[5]
        if prev is not None:
            dprev = prev[3] * r[6] - ld
        c3 = B * beta * (beta + 1.0) * (beta + 2.0) / 6.0 * float(np.abs(D).sum())
        r = STEP_MAX if c3 * STEP_MAX ** 3 < tol else STEP
        dmax = min(dmax, r * float((1.0 / a + age).min()))
    g0, g1, g2, g3 = -gb, -gc, -gbe, -gg                # d pred / d (B, ln C, beta, gamma)
    v = [c[3] * g0 + c[4] * g1 + c[5] * g2 + c[6] * g3 for c in cov[:3]]
    c3, c4, c5, c6 = cov[3], cov[4], cov[5], cov[6]
    cll = (g0 * g0 * c3[3] + g1 * g1 * c4[4] + g2 * g2 * c5[5] + g3 * g3 * c6[6]
           + 2.0 * (g0 * (g1 * c3[4] + g2 * c3[5] + g3 * c3[6])
                    + g1 * (g2 * c4[5] + g3 * c4[6]) + g2 * g3 * c5[6]))
    return [s1, ld, l1, l2, dmax, v[0], v[1], v[2], cll, dprev, 0.0, 0.0, 0.0, 0.0, 0.0, tol]


def note(c: list, p: list, delta: float, le: float, s: float) -> None:
    """A change made after the anchor: into the running sums of G's expansion at 0."""
    a = math.exp(p[4] - p[6] * le)
    sp = s - c[S_A]
    da = delta * a
    c[Q1] += da
    c[Q1S] += da * sp
    da *= a
    c[Q2] += da
    c[Q2S] += da * sp
    c[Q2SS] += da * sp * sp
    c3 = abs(p[3] * delta) * p[5] * (p[5] + 1.0) * (p[5] + 2.0) / 6.0
    lim = (STEP_MAX if c3 * STEP_MAX ** 3 < c[TOL] / PEND_MAX else STEP) / a
    if lim < c[DMAX]:
        c[DMAX] = lim


def drop(c: list, p: list, s1: float) -> float:
    """``LD`` at ``S1 = s1`` from the cache (``s1 - c[S_A] <= c[DMAX]``)."""
    d = s1 - c[S_A]
    beta = p[5]
    new = beta * (d * c[Q1] - c[Q1S]) - 0.5 * beta * (beta + 1.0) * (
        d * d * c[Q2] - 2.0 * d * c[Q2S] + c[Q2SS])
    return c[LD] + d * (c[L1] + 0.5 * d * c[L2]) + p[3] * new
