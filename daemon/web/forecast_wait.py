"""Why a run page has no forecast yet, and for how many more loss points it waits.

The forecast (`ForecastDetector`, or the finetuning one) first fits at its preset's
``warmup`` step, from the points logged between ``fit_from * step`` and
``max(holdout * step, holdout_min)`` steps before, and needs at least as many log-spaced
bins as its law has parameters plus 3; short of that it tries again at the first point
at or after ``max(refit_ratio * step, step + refit_min)``. A run that
logs every 10 steps fits at the default warm-up (step 300, its 30th point) and shows a
forecast from its 31st; 23 points show nothing, and the page says so with this estimate
(the run's own logging interval extrapolated; checked against the real detectors in
tests/test_web_forecast_wait.py). Reads the presets and the detectors' defaults; changes nothing.
"""

from __future__ import annotations

import math
from typing import Any

from wtwin.detect.base import REGISTRY
from wtwin.detect.laws import NPARAMS
from wtwin.detect.presets import PRESET_PARAMS

MAX_TRIES = 200


def _params(preset: str) -> tuple[type, dict[str, Any]] | None:
    spec = PRESET_PARAMS.get(preset)
    if spec is None:
        return None
    main = "finetuning" if "finetuning" in spec else "forecast"
    cls = REGISTRY.get(main)
    if cls is None:
        return None
    default = cls()     # its arguments' defaults (a compiled class's __init__ has no signature)
    names = ("warmup", "holdout", "holdout_min", "refit_ratio", "refit_min", "bin_ratio", "fit_from")
    got = {n: spec[main].get(n, getattr(default, n)) for n in names if hasattr(default, n)}
    return (cls, got) if len(got) == len(names) else None


def _bins(origin: float, lo: float, upto: float, every: float, bin_ratio: float) -> int:
    """About how many fit bins the points ``origin + k * every`` in [lo, upto] fill."""
    lo = max(lo, origin)
    points = math.floor((upto - origin) / every) - math.ceil((lo - origin) / every) + 1
    if points <= 0:
        return 0
    return min(points, int(math.log((upto + 1) / (lo + 1)) / math.log(bin_ratio)) + 1)


def forecast_wait(preset: str, steps: list, lr_known: bool) -> dict[str, Any] | None:
    """The wait, or None when it cannot be said (unknown preset, no points)."""
    found = _params(preset)
    steps = [s for s in steps if s is not None]
    if found is None or not steps:
        return None
    cls, p = found
    law = getattr(cls, "lr_law" if lr_known else "default_law", None)
    if law not in NPARAMS:
        return None
    need = NPARAMS[law] + 3
    first, last, n = steps[0], steps[-1], len(steps)
    every = (last - first) / (n - 1) if n > 1 and last > first else 1.0
    t = float(p["warmup"])
    for _ in range(MAX_TRIES):
        at = first + max(0, math.ceil((t - first) / every)) * every   # first point at or after t
        upto = at - max(p["holdout"] * at, p["holdout_min"])
        if at > last and _bins(first, p["fit_from"] * at, upto, every, p["bin_ratio"]) >= need:
            break               # (a try at or before ``last`` found too few: no forecast yet)
        t = max(at * p["refit_ratio"], at + p["refit_min"])
    else:
        return None
    shown = at + every            # the fit's step returns no forecast; the next point has one
    return {"preset": preset, "warmup": p["warmup"], "holdout_min": p["holdout_min"],
            "min_points": need, "points": n, "step": last, "every": round(every, 3),
            "first_step": math.ceil(shown), "points_to_go": round((shown - last) / every), "law": law}
