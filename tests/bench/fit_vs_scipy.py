"""The forecast's robust fit (`lawfit.fit`, numpy LM) against scipy's `least_squares` on the
same problems: soft-L1 cost ratio and CPU per fit, side by side in one run.

    .venv/bin/python tests/bench/fit_vs_scipy.py

The problems are the refits that `ForecastDetector` asks for on seeded synthetic runs
(five power laws, two exponential fine-tuning curves, one cosine-LR run for the schedule
law), captured with their warm starts. The reference is the solver the detector used
before: `least_squares(loss="soft_l1", x_scale="jac")`, 15 evaluations warm, 60 cold.
"""

from __future__ import annotations

import math
import platform
import random
import time

import numpy as np
from scipy.optimize import least_squares

from wtwin.detect import forecast, lawfit, laws


def scipy_fit(law, X, y, n, scale, p_prev=None, aux=None, freeze=(), lr_peak=None, ref=None):
    """The previous `lawfit.fit`, solver for solver: the reference (None for the fits it
    never did: the multi-power law's buckets, frozen parameters), on the same map of the
    losses (``ref``, see `lawfit.fit`)."""
    k = laws.NPARAMS[law]
    if len(y) < k + 3 or aux is not None or freeze:
        return None
    level, unit = ref if ref is not None else (float(y.min()), float(np.ptp(y)))
    y, scale = (y - level) / unit, scale / unit
    p_prev = None if p_prev is None else laws.to_unit(law, p_prev, level, unit)
    w = np.sqrt(n)
    p0, lb, ub = lawfit.start_point(law, X, y, p_prev)
    res = least_squares(lambda p: w * (laws.evaluate(law, X, p) - y), p0,
                        jac=lambda p: w[:, None] * laws._vector(law, X, p)[1],
                        bounds=(lb, ub), loss="soft_l1", f_scale=max(scale, 1e-12),
                        max_nfev=15 if p_prev is not None else 60, x_scale="jac",
                        ftol=1e-6, xtol=1e-6, gtol=1e-6)
    return np.array(laws.to_raw(law, res.x.tolist(), level, unit))


def drive(rng: random.Random, powers, taus, n_power: int, n_finetune: int, n_cosine: int) -> None:
    """Seeded synthetic runs through the forecast detectors: power laws ``(c, a, b, noise)``,
    exponential fine-tuning curves (time constants ``taus``), one cosine-LR run."""
    for c, a, b, sig in powers:
        det = forecast.ForecastDetector()
        for t in range(1, n_power + 1):
            det.update(t, c + a * t ** -b + rng.gauss(0, sig))
    for tau in taus:
        det = forecast.FinetuningDetector()
        for t in range(1, n_finetune + 1):
            det.update(t, 0.5 + 2 * math.exp(-t / tau) + rng.gauss(0, 0.02))
    det = forecast.ForecastDetector()
    for t in range(1, n_cosine + 1):
        lr = 3e-4 * 0.5 * (1 + math.cos(math.pi * t / n_cosine))
        det.update(t, 2.5 + 6 * (t * 3e-4) ** -0.3 + rng.gauss(0, 0.04), lr)


def captured_refits(run, fit_with=None) -> list:
    """The ``lawfit.fit`` calls (args, kwargs) the detectors make during ``run()``; each is
    answered by ``fit_with(fit, *args, **kwargs)`` (default: ``lawfit.fit`` itself)."""
    captured, fit = [], lawfit.fit

    def capture(*a, **k):
        captured.append((a, k))
        return fit_with(fit, *a, **k) if fit_with is not None else fit(*a, **k)

    lawfit.fit = capture
    try:
        run()
    finally:
        lawfit.fit = fit
    return captured


def cost_ratio(args: tuple, ours, ref) -> float:
    """Soft-L1 cost of our parameters over scipy's, on the problem ``args`` of a refit."""
    law, X, y, n, scale = args[:5]

    def cost(p):
        r = np.sqrt(n) * (laws.evaluate(law, X, p) - y) / scale
        return float(np.sum(np.sqrt(1 + r * r) - 1))
    return cost(ours) / cost(ref)


def problems() -> list:
    def scipy_ref(fit, law, X, y, n, scale, p_prev=None, *rest, **k):   # the detector runs on the reference
        p = scipy_fit(law, X, y, n, scale, p_prev, *rest, **k)
        if p is None:
            return fit(law, X, y, n, scale, p_prev, *rest, **k)
        return fit(law, X, y, n, scale, p.tolist(), **k)   # covariance etc. around that optimum

    powers = [(2.6, 9, 0.35, 0.05), (3.0, 8, 0.4, 0.03), (1.0, 5, 0.6, 0.1), (0.1, 2, 0.2, 0.01), (2.0, 3, 0.5, 0.2)]
    return captured_refits(lambda: drive(random.Random(0), powers, (800, 1600), 60000, 5000, 20000), scipy_ref)


def main() -> int:
    probs = problems()
    ratios, t_np, t_sp = [], 0.0, 0.0
    for rep in range(2):                       # interleaved: ours, theirs, per problem
        for a, k in probs:
            c0 = time.process_time()
            ours = lawfit.fit(*a, **k)
            c1 = time.process_time()
            ref = scipy_fit(*a, **k)
            c2 = time.process_time()
            t_np, t_sp = t_np + (c1 - c0), t_sp + (c2 - c1)
            if rep or ours is None or ref is None:
                continue
            ratios.append(cost_ratio(a, ours[0], ref))
    r = np.array(ratios)
    m = 2 * len(probs)
    print(f"{platform.machine()}, load {__import__('os').getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {len(probs)} refits")
    print("| solver | CPU ms/fit | soft-L1 cost vs scipy: median | p90 | max |")
    print("|---|---|---|---|---|")
    print(f"| scipy least_squares | {t_sp / m * 1e3:.2f} | 1 | 1 | 1 |")
    print(f"| lawfit.fit (numpy LM) | {t_np / m * 1e3:.2f} | {np.median(r):.4f} | "
          f"{np.percentile(r, 90):.4f} | {r.max():.4f} |")
    print(f"CPU ratio scipy/ours: {t_sp / t_np:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
