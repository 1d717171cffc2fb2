"""What the framework callbacks (``hf.py``, ``lightning.py``) share: their settings, the
alerts they were handed, and what an alert does before the framework acts on it.

Imports no framework: each callback class lists `FrameworkCallback` before its
framework's own base class.
"""

from __future__ import annotations

from typing import Any, Callable

from .alert_filter import AlertFilter
from .rewind import Rewind


class FrameworkCallback:
    def _setup(self, *, run: str | None, endpoint: str | None, preset: str | None,
               stop_on: str | None, stop_kinds, on_alert: Callable[[dict], Any] | None,
               embedded: bool | None, wandb, monitor: dict | None, emitter,
               analyze_checkpoints: bool, rewind: Rewind | None) -> None:
        self.run = run
        self.endpoint = endpoint
        self.preset = preset
        self.stop_filter = AlertFilter(stop_on, stop_kinds) if stop_on else None
        self.user_on_alert = on_alert
        self.embedded = embedded
        self.wandb = wandb
        self.monitor = monitor
        self.emitter = emitter
        self.analyze_checkpoints = analyze_checkpoints
        self.tracker = None            # a `Tracker` once training starts
        self.alerts: list[dict] = []
        self.stop_alert: dict | None = None
        self.rewind = rewind
        self._own_restore = rewind is not None and rewind.restore is None   # else the user's

    def _take(self, alert: dict) -> bool:
        """Keep ``alert``, hand it to the user's ``on_alert`` and to the rewind; True when
        it is still the framework's to act on (no rewind took it)."""
        self.alerts.append(alert)
        if self.user_on_alert is not None:
            self.user_on_alert(alert)
        if self.rewind is not None:
            self.rewind(alert)
            if self.rewind.pending is not None and self.rewind.pending.alert is alert:
                return False        # taken: recovered from, not stopped on
        return True
