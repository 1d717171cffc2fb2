"""Pure detectors and the per-run monitor that runs them side by side.

One detector a module, each registered by name in `REGISTRY`: ``forecast``,
``finetuning``, ``spike``, ``nonfinite``, ``divergence``, ``plateau``, ``overfit``,
``resume_jump``, ``rise``, ``effect`` and ``gradnorm`` (context for pages, never a page).
"""

from . import divergence, effect, forecast, gradnorm, nonfinite, overfit, plateau, resume, rise, spike  # noqa: F401
from .base import REGISTRY, Detector
from .finding import Finding, MonitorState
from .monitor import RunMonitor, WTwinMonitor
from .presets import PRESETS

__all__ = ["Detector", "Finding", "MonitorState", "PRESETS", "REGISTRY", "RunMonitor",
           "WTwinMonitor"]
