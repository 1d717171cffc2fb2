"""Baselines on the raw loss, for the detection harness: a one-sided CUSUM (EWMA
reference; river has none), river's PageHinkley (mode "up"), a rolling-z rule and the
DESIGN's 15-line rule. Each gives a statistic per point; a threshold turns it into
alarms (chosen by `calibrate.choose` from other sources' clean logs)."""

from __future__ import annotations

import math

import numpy as np

def _scale(x: np.ndarray) -> float:
    d = np.abs(np.diff(x[: min(len(x), 200)]))
    return float(1.4826 * np.median(d) / math.sqrt(2)) + 1e-12


def stat_cusum(x, k=0.5, halflife=200.0):
    s, m, S, g = _scale(x), x[0], 0.0, 0.5 ** (1 / halflife)
    out = np.empty(len(x))
    for i, v in enumerate(x):
        S = max(0.0, S + (v - m) / s - k)
        m = g * m + (1 - g) * v
        out[i] = S
    return out


def stat_page_hinkley(x, delta=0.005, alpha=1 - 1e-4):
    from river.drift import PageHinkley
    ph = PageHinkley(min_instances=30, delta=delta, threshold=math.inf, alpha=alpha, mode="up")
    out = np.zeros(len(x))
    for i, v in enumerate(x):
        ph.update(float(v))
        if i >= 30:
            out[i] = ph._sum_increase - ph._min_increase
    return out


def stat_rolling_z(x, window=200, sustain=5):
    n = len(x)
    c1, c2 = np.concatenate([[0], np.cumsum(x)]), np.concatenate([[0], np.cumsum(x * x)])
    z = np.zeros(n)
    i = np.arange(window, n)
    mu = (c1[i] - c1[i - window]) / window
    sd = np.sqrt(np.maximum((c2[i] - c2[i - window]) / window - mu * mu, 1e-24))
    z[window:] = (x[window:] - mu) / sd
    zs = np.copy(z)
    for j in range(1, sustain):
        zs[j:] = np.minimum(zs[j:], z[:-j])
    return zs


def stat_rule15(x, window=100):
    """Median of the last 100 losses minus its best so far (alarm when > 0.1)."""
    n = len(x)
    out = np.full(n, -np.inf)
    if n <= window:
        return out
    from numpy.lib.stride_tricks import sliding_window_view
    med = np.median(sliding_window_view(x, window), axis=1)
    best = np.minimum.accumulate(med)
    out[window - 1:] = med - best
    return out


STATS = {"cusum": stat_cusum, "page_hinkley": stat_page_hinkley, "rolling_z": stat_rolling_z,
         "rule15": stat_rule15, "rule15_tuned": stat_rule15}
WARM = 0.05   # baselines ignore the first 5% of a run's points (their own warm-up)


def first_cross(stat, thr, start):
    idx = np.nonzero(stat[start:] > thr)[0]
    return None if len(idx) == 0 else start + int(idx[0])


