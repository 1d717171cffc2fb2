"""Per-run spectral health: summaries of analysed checkpoints and the ``spectral`` finding.

Pure, like the detectors: ``SpectralWatch.update(step, layers)`` takes one
checkpoint's per-layer results and returns ``(summary, finding)``. The finding is
active when

- **band**: some layer's alpha is outside ``[alpha_min, alpha_max]`` (weightwatcher's
  2..6: below is over-fit/over-regularised, above is under-trained) on two
  checkpoints in a row (a single early checkpoint of a fresh run is not a page), or
- **trend**: the mean alpha rose on each of the last ``trend_checkpoints``
  checkpoints by ``trend_min_rise`` in total (healthy training drives alpha down).

>>> from wtwin.daemon.spectral.result import LayerResult
>>> def lr(name, alpha):
...     return LayerResult(name=name, kind="dense", n=10, m=10, rf=1, num_evals=10, status="ok",
...         alpha=alpha, alpha_weighted=0, xmin=1, num_pl_spikes=3, D=0.1, sigma=0.1, lambda_max=1,
...         stable_rank=1, log_norm=0, log_spectral_norm=0, detX_num=3, erg_gap=0)
>>> w = SpectralWatch()
>>> [w.update(s, [lr("a", 3.0 + s / 2), lr("b", 4.0)])[1].active for s in (1, 2, 3, 4)]
[False, False, False, True]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable

from wtwin.detect import Finding
from .result import LayerResult


@dataclass(frozen=True)
class SpectralSummary:
    step: int
    n_layers: int
    alpha_mean: float
    alpha_min: float
    alpha_max: float
    frac_outside: float
    outside: tuple[str, ...]
    layer_alpha: tuple[tuple[str, float], ...]  # at most max_layers, in model order


def summarize(step: int, layers: Iterable[LayerResult], *, alpha_min: float = 2.0, alpha_max: float = 6.0,
              max_layers: int = 32) -> SpectralSummary | None:
    """Summary over layers whose fit succeeded; None when there are none."""
    ok = [lr for lr in layers if lr.status == "ok"]
    if not ok:
        return None
    alphas = [lr.alpha for lr in ok]
    outside = tuple(lr.name for lr in ok if not alpha_min <= lr.alpha <= alpha_max)
    return SpectralSummary(step=step, n_layers=len(ok), alpha_mean=sum(alphas) / len(alphas),
                           alpha_min=min(alphas), alpha_max=max(alphas), frac_outside=len(outside) / len(ok),
                           outside=outside, layer_alpha=tuple((lr.name, lr.alpha) for lr in ok[:max_layers]))


class SpectralWatch:
    def __init__(self, *, alpha_min: float = 2.0, alpha_max: float = 6.0, trend_checkpoints: int = 3,
                 trend_min_rise: float = 0.25, max_layers: int = 32) -> None:
        if not 0 < alpha_min < alpha_max or trend_checkpoints < 2 or trend_min_rise < 0:
            raise ValueError("SpectralWatch needs 0 < alpha_min < alpha_max, trend_checkpoints >= 2")
        self.alpha_min = alpha_min
        self.alpha_max = alpha_max
        self.trend_checkpoints = trend_checkpoints
        self.trend_min_rise = trend_min_rise
        self.max_layers = max_layers
        self._means: deque[float] = deque(maxlen=trend_checkpoints + 1)
        self._prev_outside = False
        self.last: SpectralSummary | None = None

    def update(self, step: int, layers: Iterable[LayerResult]) -> tuple[SpectralSummary | None, Finding]:
        summary = summarize(step, layers, alpha_min=self.alpha_min, alpha_max=self.alpha_max,
                            max_layers=self.max_layers)
        if summary is None:
            return None, Finding("spectral", "warning", False, step, "no layer could be fitted")
        self.last = summary
        self._means.append(summary.alpha_mean)
        band = bool(summary.outside) and self._prev_outside
        self._prev_outside = bool(summary.outside)
        trend = self._rising()
        return summary, Finding("spectral", "warning", band or trend, step, self._message(summary, band, trend))

    def snapshot(self) -> dict:
        """JSON-able state; ``restore`` of it continues exactly where this left off."""
        last = None if self.last is None else {**self.last.__dict__, "outside": list(self.last.outside),
                                               "layer_alpha": [list(x) for x in self.last.layer_alpha]}
        return {"means": list(self._means), "prev_outside": self._prev_outside, "last": last}

    def restore(self, state: dict) -> None:
        self._means = deque(state["means"], maxlen=self.trend_checkpoints + 1)
        self._prev_outside = bool(state["prev_outside"])
        last = state.get("last")
        self.last = None if last is None else SpectralSummary(
            **{**last, "outside": tuple(last["outside"]), "layer_alpha": tuple(tuple(x) for x in last["layer_alpha"])})

    def _rising(self) -> bool:
        m = list(self._means)
        if len(m) < self.trend_checkpoints + 1:
            return False
        steps = all(b > a for a, b in zip(m, m[1:]))
        return steps and m[-1] - m[0] >= self.trend_min_rise

    def _message(self, s: SpectralSummary, band: bool, trend: bool) -> str:
        parts = []
        if band:
            names = ", ".join(s.outside[:5]) + (" ..." if len(s.outside) > 5 else "")
            parts.append(f"{len(s.outside)}/{s.n_layers} layers with alpha outside "
                         f"[{self.alpha_min:g}, {self.alpha_max:g}]: {names}")
        if trend:
            parts.append(f"mean alpha rose over {self.trend_checkpoints} checkpoints "
                         f"({self._means[0]:.2f} -> {self._means[-1]:.2f})")
        return "; ".join(parts) or f"mean alpha {s.alpha_mean:.2f}, all layers in band"
