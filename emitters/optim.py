"""Optimizers that watch their own loss: `WTwinAdamW`, `WTwinSGD`, `WTwinLion`.

Drop-in replacements (real `torch.optim.Optimizer` subclasses: LR schedulers, AMP grad
scalers, ``state_dict()`` and ``add_param_group`` work as usual) that take the loss at
``step``::

    opt = WTwinAdamW(model.parameters(), lr=3e-4, preset="pretraining",
                     wtwin_on_alert=lambda step, W, state: print("degrading at", step, W))
    for batch in loader:
        loss = model(batch).loss
        loss.backward()
        opt.step(loss=loss)            # or opt.step(closure) and the closure's loss is used
        opt.zero_grad()

No ``.item()`` per step: the loss tensor is kept (detached) and read every ``log_every``
steps in one transfer. Without a daemon configured the detector runs in-process
(embedded); with ``endpoint=``/``run=`` (or ``WTWIN_ENDPOINT``) the losses, with the
learning rate, go to wtwind and its alerts come back. ``wtwin_on_alert(step, W, state)``
is the upstream W-Twin signature, called for each firing alert; ``state`` is the
monitor's state (``.D``, ``.Q``, ``.W``, ``.l_pred``...) in embedded mode and the alert
dict in daemon mode. ``on_alert(alert_dict)`` gets every alert transition (firing and
resolved). The detector's state is saved in ``state_dict()["wtwin"]`` and restored by
``load_state_dict``. Call ``close()`` at the end to tell the daemon the run ended.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.optim import SGD, AdamW, Optimizer

from .buffer import LossBuffer
from .tracker import Tracker

PRESETS = ("pretraining", "adaptive_pretraining", "finetuning", "custom")

__all__ = ["Lion", "WTwinAdamW", "WTwinSGD", "WTwinLion", "PRESETS"]


class Lion(Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").

    ``c = b1*m + (1-b1)*g``; ``p <- p*(1 - lr*wd) - lr*sign(c)``; ``m <- b2*m + (1-b2)*g``.
    Use a learning rate 3-10x smaller than AdamW's and a weight decay 3-10x larger.
    """

    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid betas: {betas}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m = state["exp_avg"]
                if wd:
                    p.mul_(1 - lr * wd)
                update = m.mul(b1).add_(p.grad, alpha=1 - b1).sign_()
                p.add_(update, alpha=-lr)
                m.mul_(b2).add_(p.grad, alpha=1 - b2)
        return loss


class _WTwinMixin:
    """The watching part; mixed in before the torch optimizer class."""

    def _wtwin_init(self, *, preset: str = "pretraining", log_every: int = 10,
                    wtwin_on_alert: Callable[[int, float | None, Any], Any] | None = None,
                    on_alert: Callable[[dict], Any] | None = None,
                    endpoint: str | None = None, run: str | None = None, emitter=None,
                    embedded: bool | None = None, wandb=None, monitor: dict | None = None,
                    config: dict | None = None) -> None:
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
        self.wtwin_on_alert = wtwin_on_alert
        self.wtwin_step = 0
        self._wtwin_user_alert = on_alert
        self._wtwin_buf = LossBuffer(log_every)
        cfg = {"optimizer": type(self).__name__, **(config or {})}
        self.wtwin = Tracker(endpoint=endpoint, run=run, preset=preset, embedded=embedded,
                             emitter=emitter, on_alert=self._wtwin_alert, wandb=wandb,
                             config=cfg, monitor=monitor)

    def step(self, closure=None, loss=None):
        ret = super().step(closure) if closure is not None else super().step()
        self.wtwin_step += 1
        observed = ret if loss is None else loss
        if observed is not None:
            lr = self.param_groups[0]["lr"]
            for ev in self._wtwin_buf.add(self.wtwin_step, observed, lr):
                self.wtwin.loss(ev[0], ev[1], lr=ev[2])
        self.wtwin.poll()
        return ret

    def wtwin_flush(self) -> None:
        """Read and score what is buffered now (one device sync)."""
        for step, loss, lr, _ in self._wtwin_buf.flush():
            self.wtwin.loss(step, loss, lr=lr)

    def _wtwin_alert(self, alert: dict) -> None:
        if self._wtwin_user_alert is not None:
            self._wtwin_user_alert(alert)
        if self.wtwin_on_alert is not None and alert.get("status") == "firing":
            state = alert if alert.get("source") == "daemon" else self.wtwin.last_state
            self.wtwin_on_alert(alert.get("step"), alert.get("W"), state)

    @property
    def wtwin_alerts(self) -> list[dict]:
        return list(self.wtwin.alerts)

    def state_dict(self):
        self.wtwin_flush()
        sd = super().state_dict()
        sd["wtwin"] = {"step": self.wtwin_step, **self.wtwin.state_dict()}
        return sd

    def load_state_dict(self, state_dict) -> None:
        state_dict = dict(state_dict)
        wt = state_dict.pop("wtwin", None)
        super().load_state_dict(state_dict)
        if wt is not None:
            self.wtwin_step = int(wt["step"])
            self.wtwin.load_state_dict(wt)

    def close(self, status: str = "completed") -> None:
        self.wtwin_flush()
        self.wtwin.close(status)


_WTWIN_ARGS = ("preset", "log_every", "wtwin_on_alert", "on_alert", "endpoint", "run", "emitter",
               "embedded", "wandb", "monitor", "config")


def _split(kwargs: dict) -> tuple[dict, dict]:
    mine = {k: kwargs.pop(k) for k in _WTWIN_ARGS if k in kwargs}
    return mine, kwargs


class WTwinAdamW(_WTwinMixin, AdamW):
    """`torch.optim.AdamW` that watches the loss given to ``step(loss=...)``."""

    def __init__(self, params, lr: float = 1e-3, **kwargs) -> None:
        mine, rest = _split(kwargs)
        AdamW.__init__(self, params, lr=lr, **rest)
        self._wtwin_init(**mine)


class WTwinSGD(_WTwinMixin, SGD):
    """`torch.optim.SGD` that watches the loss given to ``step(loss=...)``."""

    def __init__(self, params, lr: float = 1e-3, **kwargs) -> None:
        mine, rest = _split(kwargs)
        SGD.__init__(self, params, lr=lr, **rest)
        self._wtwin_init(**mine)


class WTwinLion(_WTwinMixin, Lion):
    """`Lion` that watches the loss given to ``step(loss=...)``."""

    def __init__(self, params, lr: float = 1e-4, **kwargs) -> None:
        mine, rest = _split(kwargs)
        Lion.__init__(self, params, lr=lr, **rest)
        self._wtwin_init(**mine)
