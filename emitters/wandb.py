"""Log wtwin's scores and alerts into the active Weights & Biases run.

    from wtwin.emitters.wandb import WandbLogger
    opt = WTwinAdamW(model.parameters(), lr=3e-4, wandb=WandbLogger())    # or a callback's wandb=

What lands in the run, under ``prefix`` (default ``wtwin``), against its own x-axis
``wtwin/step`` (declared with ``define_metric``, so it never fights the trainer's own
``wandb.log`` step counter):

- ``wtwin/W``, ``wtwin/D``, ``wtwin/Q``, ``wtwin/T``, ``wtwin/forecast`` (and the band
  edges when the monitor has them) after every embedded-monitor update;
- ``wtwin/alert/<kind>``: 1 when an alert of that kind fires, 0 when it resolves, with
  ``wtwin/alert_severity`` (0 info, 1 warning, 2 critical), for every alert, from the
  daemon or from the embedded monitor; the alert's W and forecast are logged too.
- with ``native_alerts=True``, firing warning/critical alerts also go to ``wandb.alert``,
  which W&B routes to Slack/e-mail and Automations can trigger on.

``wandb`` is imported when the logger is first used; with no active run (and none
given) every call is a no-op.
"""

from __future__ import annotations

import math
from typing import Any

_SEVERITY = {"info": 0, "warning": 1, "critical": 2}
_STATE_FIELDS = (("W", "W"), ("D", "D"), ("Q", "Q"), ("T", "T"), ("l_pred", "forecast"),
                 ("band_lo", "forecast_lower"), ("band_hi", "forecast_upper"), ("l_obs", "loss"))


class WandbLogger:
    def __init__(self, run: Any = None, *, prefix: str = "wtwin", log_every: int = 1,
                 native_alerts: bool = False) -> None:
        if log_every < 1:
            raise ValueError(f"log_every must be >= 1, got {log_every!r}")
        self.prefix = prefix
        self.log_every = log_every
        self.native_alerts = native_alerts
        self._run = run
        self._defined_for = None
        self._n = 0
        self.logged = 0

    def _active_run(self):
        if self._run is not None:
            return self._run
        import wandb

        return wandb.run

    def _log(self, data: dict) -> bool:
        run = self._active_run()
        if run is None:
            return False
        if self._defined_for is not run:
            run.define_metric(f"{self.prefix}/step")
            run.define_metric(f"{self.prefix}/*", step_metric=f"{self.prefix}/step")
            self._defined_for = run
        run.log(data)
        self.logged += 1
        return True

    def log_state(self, state, lr=None) -> bool:
        """Log one monitor state (every ``log_every``-th call)."""
        self._n += 1
        if (self._n - 1) % self.log_every:
            return False
        p = self.prefix
        data = {f"{p}/step": int(state.step)}
        for attr, name in _STATE_FIELDS:
            val = getattr(state, attr, None)
            if val is not None and math.isfinite(float(val)):
                data[f"{p}/{name}"] = float(val)
        data[f"{p}/alerting"] = int(bool(getattr(state, "alert", False)))
        return self._log(data)

    def log_alert(self, alert: dict) -> bool:
        """Log one alert transition (firing: 1, resolved: 0) and, optionally, wandb.alert it."""
        p, kind = self.prefix, alert.get("kind", "unknown")
        firing = alert.get("status", "firing") == "firing"
        data = {f"{p}/step": int(alert.get("step") or 0), f"{p}/alert/{kind}": int(firing),
                f"{p}/alert_severity": _SEVERITY.get(alert.get("severity"), 0)}
        for key, name in (("W", "alert_W"), ("forecast", "alert_forecast"), ("loss", "alert_loss")):
            val = alert.get(key)
            if val is not None and math.isfinite(float(val)):
                data[f"{p}/{name}"] = float(val)
        logged = self._log(data)
        if logged and firing and self.native_alerts and alert.get("severity") in ("warning", "critical"):
            self._native(alert)
        return logged

    def _native(self, alert: dict) -> None:
        import wandb

        level = wandb.AlertLevel.ERROR if alert.get("severity") == "critical" else wandb.AlertLevel.WARN
        title = f"wtwin {alert.get('kind')} on {alert.get('run')}"
        text = alert.get("message") or f"{alert.get('kind')} at step {alert.get('step')}"
        try:
            self._active_run().alert(title=title, text=text, level=level, wait_duration=0)
        except Exception:  # offline mode or no network: the history entry is already logged
            pass
