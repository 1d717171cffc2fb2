"""`Tracker`: what every trainer integration shares (optimizers, HF, Lightning callbacks).

A tracker sends a run's events to wtwind through an `Emitter` when a daemon is
configured (``endpoint``, ``run`` or ``emitter`` given, or ``WTWIN_ENDPOINT`` set), and
otherwise runs the detector in-process ("embedded": no daemon needed). Either way the
user sees the same thing: alert dicts with the fields of ``Alert.to_dict()`` (run, kind,
severity, status, step, W, loss, forecast, message, ...) handed to ``on_alert`` on the
training thread, and, in embedded mode, the monitor's state (``D``, ``Q``, ``W``,
``l_pred``...) after every update. ``embedded=True`` runs the local monitor next to the
daemon (useful to chart W/D/Q per step into W&B).

Only rank 0 does anything under torch.distributed unless ``all_ranks=True``; a framework
that knows better passes ``enabled=<is global zero>, all_ranks=True``. This module
imports no framework; the embedded monitor imports the detectors (numpy) when built.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Callable

from . import _is_rank_zero, connect
from .bounds import scalar_name
from .null import NullEmitter
from .wire import KIND_PRESETS

AlertCallback = Callable[[dict], Any]


def daemon_configured(endpoint=None, run=None, emitter=None) -> bool:
    return (emitter is not None or endpoint is not None or run is not None
            or bool(os.environ.get("WTWIN_ENDPOINT")))


class Tracker:
    def __init__(self, *, endpoint: str | None = None, run: str | None = None,
                 preset: str | None = None, kind: str | None = None,
                 embedded: bool | None = None,
                 emitter=None, on_alert: AlertCallback | None = None, wandb=None,
                 config: dict | None = None, monitor: dict | None = None,
                 cooldown_s: float = 60.0, all_ranks: bool = False,
                 enabled: bool = True, max_alerts: int = 1000,
                 secret_dir: str | None = None, resume: bool = False) -> None:
        # an explicit preset wins; else the run's kind picks it (wire.KIND_PRESETS)
        self.preset = preset or KIND_PRESETS.get(kind or "", "pretraining")
        self.on_alert = on_alert
        self.wandb = wandb
        self.active = enabled and (all_ranks or _is_rank_zero())
        self.alerts: collections.deque[dict] = collections.deque(maxlen=max_alerts)
        self.last_state = None
        self.emitter = None
        self.monitor = None
        self._closed = False
        if not self.active:
            self.emitter = NullEmitter(run=run)
            return
        use_daemon = daemon_configured(endpoint, run, emitter)
        if use_daemon:
            self.emitter = emitter if emitter is not None else connect(
                endpoint, run, all_ranks=all_ranks, config=config, preset=preset, kind=kind,
                secret_dir=secret_dir, resume=resume)  # None: the user's state directory (run_secret.py)
            self.emitter.on_alert = self._from_daemon
        if embedded or (embedded is None and not use_daemon):
            self.monitor = EmbeddedMonitor(self.preset, run=self.run or "local", cooldown_s=cooldown_s,
                                           **(monitor or {}))

    @property
    def run(self) -> str | None:
        if self.emitter is not None:
            return self.emitter.run
        return self.monitor.run if self.monitor is not None else None

    @property
    def mode(self) -> str:
        return "+".join(m for m, on in (("daemon", self.emitter is not None and self.active),
                                        ("embedded", self.monitor is not None)) if on) or "off"

    # ---- events ----------------------------------------------------------------------
    def loss(self, step: int, loss: float, lr=None, grad_norm=None, **extra):
        """Record one training loss; returns the embedded monitor's state (or None)."""
        if not self.active:
            return None
        if self.emitter is not None:
            self.emitter.loss(step, loss, lr=lr, grad_norm=grad_norm, **extra)
        state = None
        if self.monitor is not None:
            state, alerts = self.monitor.update(int(step), float(loss), None if lr is None else float(lr))
            self.last_state = state
            if self.wandb is not None:
                self.wandb.log_state(state, lr=lr)
            for alert in alerts:
                self._dispatch(alert)
        self.poll()
        return state

    def eval(self, step: int, **metrics) -> None:
        if not self.active:
            return
        if self.emitter is not None:
            self.emitter.eval(step, **metrics)
        if self.monitor is not None:
            for alert in self.monitor.update_eval(int(step), {k: float(v) for k, v in metrics.items()}):
                self._dispatch(alert)
        self.poll()

    def scalars(self, step: int, values: dict, skip=()) -> None:
        """Every number of ``values`` whose key is not in ``skip`` as a ``scalar`` event
        (a key made a safe name: ``bounds.scalar_name``); what is not a number is left."""
        if not self.active or self.emitter is None:
            return
        for key, val in values.items():
            name = scalar_name(key) if key not in skip else None
            if name is None or type(val) is bool:
                continue
            try:
                val = float(val.detach() if hasattr(val, "detach") else val)
            except (TypeError, ValueError, RuntimeError):   # a string, a tensor of many values
                continue
            self.emitter.scalar(step, name, val)

    def checkpoint(self, step: int, path, **kw) -> None:
        if self.active and self.emitter is not None:
            self.emitter.checkpoint(step, path, **kw)

    def poll(self) -> int:
        """Hand alerts that came back from the daemon to ``on_alert``, on this thread."""
        return self.emitter.poll() if self.emitter is not None else 0

    def close(self, status: str = "completed") -> None:
        if self._closed:
            return
        self._closed = True
        if self.emitter is not None:
            self.emitter.close(status)

    # ---- alerts ----------------------------------------------------------------------
    def _from_daemon(self, msg: dict) -> None:
        alert = {k: v for k, v in msg.items() if k not in ("v", "type")}
        alert.setdefault("source", "daemon")
        self._dispatch(alert)

    def _dispatch(self, alert: dict) -> None:
        self.alerts.append(alert)
        if self.wandb is not None:
            self.wandb.log_alert(alert)
        if self.on_alert is not None:
            self.on_alert(alert)

    # ---- checkpointing the tracker itself --------------------------------------------
    def state_dict(self) -> dict:
        return {"monitor": self.monitor.snapshot() if self.monitor is not None else None}

    def load_state_dict(self, sd: dict) -> None:
        if self.monitor is not None and sd.get("monitor") is not None:
            self.monitor.restore(sd["monitor"])


class EmbeddedMonitor:
    """The daemon's detector and alert policy, in the trainer's process.

    A `wtwin.detect.replay.Session`: the daemon's ``RunMonitor`` and `AlertPolicy` (firing,
    dedup, resolved, cooldown), so an embedded alert dict looks exactly like a daemon one.
    """

    def __init__(self, preset: str = "pretraining", *, run: str = "local",
                 cooldown_s: float = 60.0, clock: Callable[[], float] = time.time,
                 **overrides) -> None:
        from wtwin.detect.replay import Session

        self.preset = preset
        self.run = run
        self.clock = clock
        self._session = Session(run, preset, cooldown_s=cooldown_s, **overrides)
        self._det, self._policy = self._session.monitor, self._session.policy

    def update(self, step: int, loss: float, lr: float | None = None):
        state, due = self._session.loss(step, loss, lr, now=self.clock())
        return state, self._dicts(due)

    def update_eval(self, step: int, metrics: dict) -> list[dict]:
        return self._dicts(self._session.eval(step, metrics, now=self.clock())[1])

    @staticmethod
    def _dicts(due) -> list[dict]:
        out = []
        for a in due:
            d = a.to_dict()
            d["source"] = "embedded"
            out.append(d)
        return out

    def snapshot(self) -> dict:
        return {"detector": self._det.snapshot(), "policy": self._policy.snapshot()}

    def restore(self, snap: dict) -> None:
        self._det.restore(snap["detector"])
        self._policy.restore(snap["policy"])
