"""`RunMonitor`: every detector of one run, side by side, behind one small contract.

The daemon's run state only uses this contract:

- ``RunMonitor(preset="pretraining", **overrides)``
- ``update_loss(step, loss, lr=None, grad_norm=None) -> MonitorState``
- ``update_eval(step, metrics) -> MonitorState | None``
- ``snapshot() -> dict`` (msgpack/JSON-safe) and ``restore(snapshot)``

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

from .finding import Finding, MonitorState
from .residual import SustainedResidual

PRESETS = ("pretraining", "adaptive_pretraining", "finetuning", "custom")


class RunMonitor:
    def __init__(self, preset: str = "pretraining", **overrides) -> None:
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
        self.preset = preset
        self._residual = SustainedResidual(**overrides)

    def update_loss(self, step: int, loss: float, lr: float | None = None,
                    grad_norm: float | None = None) -> MonitorState:
        if not math.isfinite(loss):
            f = Finding("nonfinite", "critical", True, step, f"loss is {loss} at step {step}")
            return MonitorState(step=step, l_obs=loss, alert=True, findings=(f,))
        s = self._residual.update(step, loss)
        findings = [Finding("nonfinite", "critical", False, step)]
        msg = f"smoothed loss {s.smoothed:.4g} is {s.score:.1f} noise units above its best {s.best:.4g}"
        findings.append(Finding("drift", "warning", s.active, step, msg))
        return MonitorState(step=step, l_obs=loss, l_pred=s.best, W=s.score, alert=s.active,
                            findings=tuple(findings))

    def update_eval(self, step: int, metrics: dict) -> MonitorState | None:
        return None

    def snapshot(self) -> dict:
        return {"preset": self.preset, "residual": self._residual.snapshot()}

    def restore(self, snap: dict) -> None:
        self._residual.restore(snap["residual"])
