"""PyTorch Lightning integration: one callback.

    from wtwin.emitters.lightning import WTwinCallback
    trainer = L.Trainer(..., callbacks=[WTwinCallback(run="resnet-lr0.1")])

It reads the loss each ``training_step`` returns (kept as a detached tensor and read
every ``log_every`` optimizer steps in one transfer: no ``.item()`` per step), the
learning rate of the first optimizer, the validation metrics whose name contains
``val`` (``val_loss`` and friends) after each validation, and sends a ``checkpoint``
event for each new file a ``ModelCheckpoint`` writes. Steps are the ones Lightning's own
loggers put on the batch's metrics (``metrics.csv``, TensorBoard): the count of batches
that stepped the optimizer before this one, one per optimizer step (gradient accumulation
handled: the loss of the micro-batch that steps, unscaled by the accumulation, as
``self.log`` sees it). The gradient norm (total L2 over the parameters, before clipping,
after AMP unscaling) is read in ``on_before_optimizer_step`` and sent with the loss. A
firing alert at or above ``stop_on`` (default ``"critical"``) sets
``trainer.should_stop``, and leaves the alert in ``wtwin_stop.json`` in
``trainer.log_dir`` (beside ``metrics.csv``: ``wtwin monitor metrics.csv --fail-on``
fails that run). The monitor's state is saved with Lightning's checkpoints
(``state_dict``/``load_state_dict`` of the callback).

``rewind=Rewind(...)`` (`wtwin.emitters.rewind`) adds closed-loop recovery: each file a
``ModelCheckpoint`` writes is recorded with the step it was saved at, and on a matching
alert the newest one before the alert's onset is loaded at the next batch end (weights,
optimizer and scheduler states, through ``trainer.strategy``). An alert the rewind takes
does not stop training. ``trainer.global_step`` keeps counting: the batches in between
are skipped, and the run ends at ``max_steps`` with that many fewer updates. A ``Rewind``
given its own ``restore`` keeps it. Single process only (``world_size > 1``: a warning, and
no rewind).

The last loss of each flush also carries the mean step time and data wait of the steps
since the previous one (``on_train_batch_start`` to ``on_train_batch_end``, and the gap
before it: `timing.StepClock`), the world size as ``gpus``, and, unless
``memory_every=0``, the accelerator's allocated, reserved and total bytes
(`timing.device_memory`).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback

from . import run_secret
from .framework import FrameworkCallback, write_stop_record
from .buffer import LossBuffer
from .rewind import NOT_DISTRIBUTED, Rewind
from .timing import StepClock, device_memory
from .tracker import Tracker

_SENT = ("loss", "train_loss", "train/loss")   # logged names of the loss the callback sends


class WTwinCallback(FrameworkCallback, Callback):
    def __init__(self, run: str | None = None, endpoint: str | None = None, *,
                 preset: str = "pretraining", log_every: int = 10,
                 stop_on: str | None = "critical", stop_kinds=None,
                 on_alert: Callable[[dict], Any] | None = None, embedded: bool | None = None,
                 wandb=None, monitor: dict | None = None, emitter=None,
                 analyze_checkpoints: bool = True, rewind: Rewind | None = None,
                 memory_every: int = 50) -> None:
        self._setup(run=run, endpoint=endpoint, preset=preset, stop_on=stop_on, stop_kinds=stop_kinds,
                    on_alert=on_alert, embedded=embedded, wandb=wandb, monitor=monitor, emitter=emitter,
                    analyze_checkpoints=analyze_checkpoints, rewind=rewind)
        self._buf = LossBuffer(log_every)
        self._last_step = -1
        self._sent_ckpts: set[str] = set()
        self._pending_state: dict | None = None
        self._saving_step = 0          # the step of the checkpoint being written
        self._grad_norm = None         # this optimizer step's gradient norm (a tensor)
        self.clock = StepClock()       # step time and data wait (timing.py)
        self.memory_every = memory_every

    # ---- lifecycle -------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self.tracker is not None:
            return
        config = {"framework": "lightning", "max_steps": trainer.max_steps,
                  "max_epochs": trainer.max_epochs, "world_size": trainer.world_size,
                  "accumulate_grad_batches": trainer.accumulate_grad_batches,
                  "model": type(pl_module).__name__}
        if trainer.is_global_zero:  # older versions kept the run secret there
            run_secret.move_out_of(self.run, trainer.default_root_dir)
        self.tracker = Tracker(endpoint=self.endpoint, run=self.run, preset=self.preset,
                               embedded=self.embedded, emitter=self.emitter, wandb=self.wandb,
                               on_alert=self._on_alert, config=config, monitor=self.monitor,
                               enabled=trainer.is_global_zero, all_ranks=True,
                               # fit(ckpt_path=...) goes on with the run: a resume
                               resume=bool(getattr(trainer, "ckpt_path", None))
                               or self._pending_state is not None)
        if self._pending_state is not None:
            self.tracker.load_state_dict(self._pending_state)
        if self.rewind is not None and trainer.world_size > 1:
            warnings.warn(NOT_DISTRIBUTED, stacklevel=2)
            self.rewind = None
        if self.rewind is not None:
            self.rewind.attach(self.tracker.emitter)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.clock.begin()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.clock.end()
        if self.tracker is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        step = logger_step(trainer)
        if loss is not None and step is not None and step != self._last_step:
            self._last_step = step
            if pl_module.automatic_optimization and trainer.accumulate_grad_batches > 1:
                loss = loss * trainer.accumulate_grad_batches  # Lightning divided it for backward
            lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
            grad_norm, self._grad_norm = self._grad_norm, None
            flushed = self._buf.add(step, loss, lr, grad_norm)
            if flushed:     # the timing of the steps since the last flush, on its last loss
                timing = {**self.clock.take(), "gpus": trainer.world_size,
                          **(device_memory(1) if self.memory_every else {})}
                for ev in flushed[:-1]:
                    self.tracker.loss(ev[0], ev[1], lr=ev[2], grad_norm=ev[3])
                ev = flushed[-1]
                self.tracker.loss(ev[0], ev[1], lr=ev[2], grad_norm=ev[3], **timing)
                # what self.log logged, read at a flush only: validation's goes as eval
                self.tracker.scalars(ev[0], {k: v for k, v in trainer.logged_metrics.items()
                                             if "val" not in k and getattr(v, "numel", lambda: 1)() == 1},
                                     skip=_SENT)
        self._send_checkpoints(trainer)
        self._poll(trainer)
        if self.rewind is not None and self.rewind.pending is not None:
            if self._own_restore:
                self.rewind.restore = lambda path: restore_checkpoint(trainer, path)
            self.rewind.apply(step, optimizers=trainer.optimizers,
                              schedulers=[c.scheduler for c in trainer.lr_scheduler_configs])

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.tracker is not None:
            self._grad_norm = total_grad_norm(pl_module.parameters())

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self._saving_step = trainer.global_step

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.tracker is None or trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()
                   if "val" in k and getattr(v, "numel", lambda: 1)() == 1}
        if metrics:
            self.tracker.eval(trainer.global_step, **metrics)
        self._poll(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.tracker is None:
            return
        self._flush()
        self._send_checkpoints(trainer)
        self.tracker.poll()
        self.tracker.close("stopped" if self.stop_alert is not None else "completed")
        if trainer.is_global_zero:   # for the gate: `wtwin monitor metrics.csv --fail-on`
            write_stop_record(trainer.log_dir or trainer.default_root_dir,
                              self.stop_record(trainer.global_step))

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self.tracker is not None:
            self._flush()
            self.tracker.close("failed")

    # ---- state saved with Lightning checkpoints ---------------------------------------
    def state_dict(self) -> dict:
        if self.tracker is None:
            return {}
        self._flush()
        return {"tracker": self.tracker.state_dict(), "last_step": self._last_step}

    def load_state_dict(self, state_dict: dict) -> None:
        if not state_dict:
            return
        self._last_step = state_dict.get("last_step", -1)
        if self.tracker is None:
            self._pending_state = state_dict["tracker"]
        else:
            self.tracker.load_state_dict(state_dict["tracker"])

    # ---- helpers ---------------------------------------------------------------------
    def _flush(self) -> None:
        for step, loss, lr, grad_norm in self._buf.flush():
            self.tracker.loss(step, loss, lr=lr, grad_norm=grad_norm)

    def _send_checkpoints(self, trainer) -> None:
        if not self.analyze_checkpoints and self.rewind is None:
            return
        for cb in getattr(trainer, "checkpoint_callbacks", ()):
            for path in (getattr(cb, "last_model_path", ""), getattr(cb, "best_model_path", "")):
                if path and path not in self._sent_ckpts and os.path.exists(path):
                    self._sent_ckpts.add(path)
                    if self.rewind is not None:
                        self.rewind.saved(self._saving_step, path)
                    if self.analyze_checkpoints:
                        self.tracker.checkpoint(trainer.global_step, path, format="torch",
                                                epoch=trainer.current_epoch)

    def _poll(self, trainer) -> None:
        self.tracker.poll()
        if self.stop_alert is not None:
            trainer.should_stop = True

    def _on_alert(self, alert: dict) -> None:
        if not self._take(alert):
            return
        if self.stop_filter is not None and self.stop_alert is None and self.stop_filter.matches(alert):
            self.stop_alert = alert


def logger_step(trainer) -> int | None:
    """The step Lightning's loggers give this batch's training metrics, or None on a
    micro-batch that only accumulates (Lightning logs none for it). Read in
    ``on_train_batch_end``, before Lightning counts the batch as stepped."""
    loop = trainer.fit_loop.epoch_loop
    if not hasattr(loop, "_batches_that_stepped"):  # another Lightning: the optimizer's count
        return trainer.global_step
    if loop._should_accumulate():
        return None
    return loop._batches_that_stepped


def total_grad_norm(parameters):
    """The L2 norm of all gradients together, as a tensor (read later with the losses:
    no device sync here); None when no parameter has a gradient."""
    import torch

    norms = [p.grad.detach().norm(2).float() for p in parameters if p.grad is not None]
    return torch.stack(norms).norm(2) if norms else None


def restore_checkpoint(trainer, path: str) -> None:
    """Load a Lightning checkpoint's weights, optimizer and scheduler states in place."""
    ckpt = trainer.strategy.load_checkpoint(path)
    trainer.strategy.load_model_state_dict(ckpt)
    for opt, state in zip(trainer.optimizers, ckpt.get("optimizer_states", ())):
        opt.load_state_dict(state)
    for cfg, state in zip(trainer.lr_scheduler_configs, ckpt.get("lr_schedulers", ())):
        cfg.scheduler.load_state_dict(state)
