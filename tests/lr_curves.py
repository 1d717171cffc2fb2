"""Synthetic loss curves with their learning rate, for the schedule-aware laws.

Schedules (200 warm-up steps, peak 1e-3): ``wsd`` (stable, then a linear decay over the
last quarter), ``cosine``, ``step`` (x0.3 at half and at three quarters), ``restart``
(three cosine cycles, warm restarts to the peak) and ``constant``. Truths: Luo et al.'s
multi-power law computed exactly (the O(t) sum over every LR change, in numpy) and
Tissue et al.'s law with the momentum annealing area.
"""

from __future__ import annotations

import math

import numpy as np

KINDS = ("wsd", "cosine", "step", "restart")
MPL_TRUTH = [2.8, math.log(0.5), 0.4, 400.0, math.log(0.1), 0.6, 0.5]   # mpl parameters
PEAK, WARM = 1e-3, 200


def lr(kind: str, t: int, n: int) -> float:
    if t < WARM:
        return PEAK * t / WARM
    if kind == "wsd":
        return PEAK if t < 0.75 * n else PEAK * max(0.0, (n - t) / (0.25 * n)) + 1e-6
    if kind == "step":
        return PEAK * (1.0 if t < 0.5 * n else 0.3 if t < 0.75 * n else 0.09)
    if kind == "restart":
        period = n // 3
        return PEAK * 0.5 * (1 + math.cos(math.pi * ((t - WARM) % period) / period)) + 1e-5
    if kind == "constant":
        return PEAK
    return PEAK * 0.5 * (1 + math.cos(math.pi * (t - WARM) / (n - WARM))) + 1e-5


def etas(kind: str, n: int) -> np.ndarray:
    """eta_1 .. eta_n."""
    return np.array([lr(kind, t, n) for t in range(1, n + 1)])


def warmup_end(eta: np.ndarray) -> int:
    """Index (0-based) of the first LR change that is not part of the first rise."""
    d = np.diff(eta)
    down = np.nonzero(d < 0)[0]
    return int(down[0]) + 1 if len(down) else len(eta)


def _events(eta: np.ndarray, p: list):
    """Every LR change after warm-up: step index, change, ``C eta^-gamma``, S1 before it."""
    C, gam = math.exp(p[4]), p[6]
    S1 = np.cumsum(eta)
    delta = np.zeros(len(eta))
    delta[1:] = eta[:-1] - eta[1:]
    delta[:warmup_end(eta)] = 0.0
    ks = np.nonzero(delta)[0]
    return ks, delta[ks], C * np.maximum(eta[ks], 1e-8 * eta.max()) ** -gam, S1[ks] - eta[ks]


def mpl_drop_at(eta: np.ndarray, t: int, S: np.ndarray, p: list = MPL_TRUTH) -> np.ndarray:
    """The exact loss drop ``LD`` from the changes of steps 1..t, at S1 values ``S``."""
    ks, d, a, s = _events(eta, p)
    m = ks < t
    x = a[None, m] * np.maximum(np.asarray(S)[:, None] - s[None, m], 0.0)
    return p[3] * ((1.0 - (1.0 + x) ** -p[5]) @ d[m])


def mpl_loss(eta: np.ndarray, p: list = MPL_TRUTH) -> np.ndarray:
    """The multi-power law at every step, the loss drop summed exactly over all changes
    after warm-up (O(t) per step, chunked in numpy)."""
    L0, A, alpha, B, beta = p[0], math.exp(p[1]), p[2], p[3], p[5]
    S1 = np.cumsum(eta)
    _, d, a, s = _events(eta, p)
    ld = np.zeros(len(eta))
    for lo in range(0, len(eta), 1000):
        S = S1[lo:lo + 1000, None]
        x = a[None, :] * np.maximum(S - s[None, :], 0.0)
        ld[lo:lo + 1000] = B * ((1.0 - (1.0 + x) ** -beta) @ d)
    return L0 + A * S1 ** -alpha - ld


def tissue_loss(eta: np.ndarray, decay: float = 0.999) -> np.ndarray:
    """Tissue et al.'s law ``2.8 + (S1 + 0.05)^-0.4 - 0.5 S2`` (momentum form of S2)."""
    out, s1, s2, mom, prev = np.empty(len(eta)), 0.0, 0.0, 0.0, None
    for i, e in enumerate(eta.tolist()):
        mom = mom * decay + ((prev if prev is not None else e) - e)
        s1, s2, prev = s1 + e, s2 + mom, e
        out[i] = 2.8 + (s1 + 0.05) ** -0.4 - 0.5 * s2
    return out


def curve(truth: str, kind: str, n: int = 12000, noise: float = 0.03, seed: int = 0):
    """``(eta, clean loss, noisy loss)`` for a truth (``mpl`` or ``tissue``) and schedule."""
    eta = etas(kind, n)
    clean = mpl_loss(eta) if truth == "mpl" else tissue_loss(eta)
    rng = np.random.default_rng(seed)
    return eta, clean, clean + rng.normal(0.0, noise, n)
