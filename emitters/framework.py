"""What the framework callbacks (``hf.py``, ``lightning.py``) share: their settings, the
alerts they were handed, and what an alert does before the framework acts on it.

Imports no framework: each callback class lists `FrameworkCallback` before its
framework's own base class.

A callback that stopped training on an alert leaves a record the offline gate reads
(``wtwin monitor --fail-on``, `wtwin.offline.stops`): ``wtwin_stop.json`` in the run's
output folder (beside HF's ``trainer_state.json``, Lightning's ``metrics.csv``), and in
HF's ``log_history`` an entry ``{"step": N, "wtwin_stopped": RECORD}``, so the
``trainer_state.json`` the Trainer saves afterwards carries it too.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

STOP_FILE = "wtwin_stop.json"
STOP_KEY = "wtwin_stopped"

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

    def stop_record(self, stopped_at: int) -> dict | None:
        """What the gate needs of the alert training stopped on (None: not stopped)."""
        a = self.stop_alert
        if a is None:
            return None
        return {"kind": str(a.get("kind")), "severity": str(a.get("severity")),
                "step": a.get("step"), "stopped_at_step": int(stopped_at),
                "message": str(a.get("message") or ""), "run": self.run,
                "source": a.get("source")}


def write_stop_record(folder: str | None, record: dict | None) -> str | None:
    """Write ``record`` to ``folder``/wtwin_stop.json (atomically); its path, or None."""
    if record is None or not folder:
        return None
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, STOP_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({STOP_KEY: record}, f, indent=1)
    os.replace(tmp, path)
    return path
