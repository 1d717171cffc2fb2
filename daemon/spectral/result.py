"""Per-layer spectral metrics: the value both engines return.

Definitions follow weightwatcher 0.7.7 (``apply_esd``, ``apply_powerlaw``,
``apply_norm_metrics``, ``apply_detX``), eigenvalues ``lambda = sigma^2`` of the raw
weight matrix (no 1/N):

- ``lambda_max`` = max eigenvalue; ``log_spectral_norm`` = log10(lambda_max);
- ``log_norm`` = log10(sum lambda) (squared Frobenius norm); ``stable_rank`` =
  sum / max;
- ``alpha``, ``xmin``, ``D``, ``sigma``, ``num_pl_spikes`` from the power-law fit;
  ``alpha_weighted`` = alpha * log10(lambda_max);
- ``detX_num`` from the log-sum ERG count, ``erg_gap`` = detX_num - num_pl_spikes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .powerlaw import detx_count, fit_power_law

METRIC_FIELDS = (
    "alpha",
    "alpha_weighted",
    "xmin",
    "num_pl_spikes",
    "D",
    "sigma",
    "lambda_max",
    "stable_rank",
    "log_norm",
    "log_spectral_norm",
    "detX_num",
    "erg_gap",
)


@dataclass(frozen=True, kw_only=True)
class LayerResult:
    name: str
    kind: str
    n: int
    m: int
    rf: int
    num_evals: int
    status: str  # "ok" | "failed" (the power-law fit failed; alpha is -1 then)
    alpha: float
    alpha_weighted: float
    xmin: float
    num_pl_spikes: int
    D: float
    sigma: float
    lambda_max: float
    stable_rank: float
    log_norm: float
    log_spectral_norm: float
    detX_num: int
    erg_gap: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, spec: Any, ok: bool, **metrics: Any) -> "LayerResult":
        """The layer's shape from its ``spec`` (name, kind, n, m, rf), its metrics as given."""
        return cls(name=spec.name, kind=spec.kind, n=spec.n, m=spec.m, rf=spec.rf,
                   status="ok" if ok else "failed", **metrics)


def layer_metrics(spec: Any, evals: np.ndarray) -> LayerResult:
    """All metrics of one layer from its (pooled) eigenvalues."""
    evals = np.sort(np.asarray(evals, dtype=np.float64))
    fit = fit_power_law(evals)
    lam_max = float(evals[-1])
    total = float(evals.sum())
    log_spec = math.log10(lam_max) if lam_max > 0 else -math.inf
    detx = detx_count(evals)
    return LayerResult.of(
        spec, fit.ok,
        num_evals=int(evals.size),
        alpha=fit.alpha,
        alpha_weighted=fit.alpha * log_spec,
        xmin=fit.xmin,
        num_pl_spikes=fit.num_pl_spikes,
        D=fit.D,
        sigma=fit.sigma,
        lambda_max=lam_max,
        stable_rank=total / lam_max if lam_max > 0 else math.nan,
        log_norm=math.log10(total) if total > 0 else -math.inf,
        log_spectral_norm=log_spec,
        detX_num=detx,
        erg_gap=detx - fit.num_pl_spikes,
    )
