"""Pure detectors and the per-run monitor that runs them side by side."""

from .finding import Finding, MonitorState
from .monitor import PRESETS, RunMonitor

__all__ = ["Finding", "MonitorState", "PRESETS", "RunMonitor"]
