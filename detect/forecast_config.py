"""`ForecastConfig`: the arguments of the `forecast` and `finetuning` detectors, checked once.

Units and what each one does: docs/DETECTION.md and `forecast`'s docstring. A preset's or
a user's override (``RunMonitor("custom", forecast={"threshold": 30.0})``) is one of
these fields; a bad value raises `errors.ConfigError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import check, fraction, positive

LAWS = ("auto", "power", "exp", "schedule", "mpl")


@dataclass(frozen=True, kw_only=True)
class ForecastConfig:
    warmup: int = 300              # steps before the first fit
    holdout: float = 0.1           # a building deviation's window, as a share of the step
    holdout_min: int = 100         # ... and at least this many steps
    fit_from: float = 0.3          # the fit starts at this share of the run
    bin_ratio: float = 1.02        # the summary's log-spaced bins grow by this ratio
    refit_ratio: float = 1.15      # refits every this ratio in step
    refit_min: int = 50            # ... and at least this many steps apart
    threshold: float = 15.0        # CUSUM alarm level (noise units)
    allowance: float = 0.75        # CUSUM allowance per point
    clip: float = 4.0              # residuals winsorized at this many noise units
    gate: float = 1.0              # the smoothed residual D must be above this too
    noise_halflife: float = 500.0  # steps: the residual noise's EWMA
    d_halflife: float = 50.0       # steps: D's EWMA
    band_z: float = 3.0            # the band's half-width in standard deviations
    bias_z: float = 3.0            # the forecast's own uncertainty granted to a residual
    freeze: float = 0.3            # refits freeze while S is above this share of threshold
    anneal_decay: float = 0.999    # the annealing momentum's decay per step
    law: str = "auto"              # auto, power, exp, schedule or mpl

    def __post_init__(self) -> None:
        for name in ("warmup", "holdout_min", "refit_min"):
            v = getattr(self, name)
            check(isinstance(v, int) and v >= 1, name, v, "an int >= 1 (steps)")
        for name in ("threshold", "allowance", "clip", "gate", "noise_halflife", "d_halflife",
                     "band_z", "bias_z"):
            positive(name, getattr(self, name))
        fraction("holdout", self.holdout, 0.0, 0.9)
        fraction("fit_from", self.fit_from, 0.0, 0.9)
        fraction("freeze", self.freeze, 0.0, 1.0 + 1e-9)
        fraction("anneal_decay", self.anneal_decay)
        check(isinstance(self.bin_ratio, float) and 1.0 < self.bin_ratio <= 2.0, "bin_ratio",
              self.bin_ratio, "a float in (1, 2]")
        check(isinstance(self.refit_ratio, float) and 1.0 < self.refit_ratio <= 4.0,
              "refit_ratio", self.refit_ratio, "a float in (1, 4]")
        check(self.law in LAWS, "law", self.law, "one of 'auto', 'power', 'exp', 'schedule', 'mpl'")


ARGS = tuple(f.name for f in fields(ForecastConfig))
