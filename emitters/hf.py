"""Hugging Face ``Trainer`` integration: one callback.

    from wtwin.emitters.hf import WTwinCallback
    trainer = Trainer(..., callbacks=[WTwinCallback(run="gpt2-lr3e-4")])

What it sends, keyed by ``state.global_step``: ``loss``, ``learning_rate`` and
``grad_norm`` from each ``on_log`` (and ``tokens``, ``state.num_input_tokens_seen``, when
``include_num_input_tokens_seen`` makes the Trainer count them) (the final averaged ``train_loss`` summary is
ignored), ``eval_loss`` (as ``val_loss``) and the other eval metrics from
``on_evaluate``, a ``checkpoint`` event for the saved weights on ``on_save``, and
``run_end`` when training ends. Each loss also carries the mean step time and data wait
since the last log (``on_step_begin`` to ``on_step_end``, and the gap before it:
`timing.StepClock`), and every ``memory_every`` steps (default 50; 0: never) the
accelerator's allocated, reserved and total bytes (`timing.device_memory`). Alerts from the daemon (or from the in-process monitor
when no daemon is configured) are handed to ``on_alert`` and kept in ``alerts``; a
firing alert at or above ``stop_on`` (default ``"critical"``; ``None`` disables) sets
``control.should_training_stop`` (``stop_kinds`` narrows it to some kinds), and one at or above ``save_on`` (default off) sets
``control.should_save``. A run stopped on an alert leaves the alert in ``log_history``
(``{"step": N, "wtwin_stopped": {...}}``, in every ``trainer_state.json`` saved after)
and in ``OUTPUT_DIR/wtwin_stop.json``: ``wtwin monitor trainer_state.json --fail-on``
fails it even though the stopped log itself holds no NaN.

A non-finite loss pages at its own step, whatever ``logging_steps`` and
``logging_nan_inf_filter`` say: with that filter on (the Trainer's default) a NaN/inf step
is replaced by the running average before ``on_log`` sees it. So the callback also reads
the raw loss of every training forward pass (a forward hook on the model, registered at
``on_train_begin``: the ``loss`` field of the model's output, summed on the device over
the micro-batches of one optimizer step) and checks it once per optimizer step in
``on_step_end``: one device sync a step, the cost the filter itself pays. A non-finite
step is sent at once as that step's loss; a later ``on_log`` for the same step is not sent
again. A custom ``compute_loss`` whose loss is not in the model's output is not seen
this way (``raw_loss=False`` turns the hook off); then only ``on_log`` reports losses.

``rewind=Rewind(...)`` (`wtwin.emitters.rewind`) adds closed-loop recovery: each saved
checkpoint folder is recorded, and on a matching alert the model's weights,
``optimizer.pt`` and ``scheduler.pt`` of the newest folder before the alert's onset are
loaded at the next ``on_step_end``. An alert the rewind takes does not stop training; one
it refuses (budget spent, no folder old enough) still can. ``state.global_step`` keeps
counting (a callback cannot rewind the Trainer's logging bookkeeping): the batches in
between are skipped, and the run ends at ``max_steps`` with that many fewer updates. Keep
``save_total_limit`` large enough that a folder ``lookback`` steps old still exists. A
``Rewind`` given its own ``restore`` keeps it. Single process only: with ``world_size > 1``
the callback warns and turns the rewind off (alerts reach rank 0 only).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable

from transformers import TrainerCallback

from . import run_secret
from .alert_filter import AlertFilter
from .framework import STOP_KEY, FrameworkCallback, write_stop_record
from .model_classes import classes_of
from .rewind import NOT_DISTRIBUTED, Rewind
from .timing import StepClock, device_memory
from .tracker import Tracker

_WEIGHT_FILES = (("model.safetensors", "safetensors"), ("pytorch_model.bin", "torch"))

# the training arguments of TRL's online RL trainers: their loss is a policy or value loss
# (GRPO's is about beta x KL), not meant to fall, so the run is sent as kind "rl" (the
# `stationary` preset) when no preset is named
RL_ARGS = ("GRPOConfig", "PPOConfig", "RLOOConfig", "OnlineDPOConfig")


class WTwinCallback(FrameworkCallback, TrainerCallback):
    def __init__(self, run: str | None = None, endpoint: str | None = None, *,
                 preset: str | None = None, stop_on: str | None = "critical",
                 stop_kinds=None, save_on: str | None = None, on_alert: Callable[[dict], Any] | None = None,
                 embedded: bool | None = None, wandb=None, analyze_checkpoints: bool = True,
                 monitor: dict | None = None, emitter=None, raw_loss: bool = True,
                 rewind: Rewind | None = None, memory_every: int = 50) -> None:
        self._setup(run=run, endpoint=endpoint, preset=preset, stop_on=stop_on, stop_kinds=stop_kinds,
                    on_alert=on_alert, embedded=embedded, wandb=wandb, monitor=monitor, emitter=emitter,
                    analyze_checkpoints=analyze_checkpoints, rewind=rewind)
        self.save_filter = AlertFilter(save_on) if save_on else None
        self._want_stop = False
        self._want_save = False
        self.raw_loss = raw_loss
        self._raw = None            # the summed raw loss of the current optimizer step (a tensor)
        self._hook = None
        self._sent_step = -1        # the step whose (non-finite) loss was sent from the hook
        self.clock = StepClock()
        self.memory_every = memory_every

    # ---- lifecycle -------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.raw_loss and self._hook is None and hasattr(model, "register_forward_hook"):
            self._hook = model.register_forward_hook(self._saw_forward)
        if self.rewind is not None and args.world_size > 1:
            warnings.warn(NOT_DISTRIBUTED, stacklevel=2)
            self.rewind = None
        if self.tracker is not None:
            return
        if state.is_world_process_zero:
            run_secret.move_out_of(self.run, args.output_dir)  # push_to_hub uploads output_dir
        config = {"framework": "transformers", "learning_rate": args.learning_rate,
                  "per_device_train_batch_size": args.per_device_train_batch_size,
                  "gradient_accumulation_steps": args.gradient_accumulation_steps,
                  "max_steps": state.max_steps, "world_size": args.world_size,
                  "lr_scheduler_type": _plain(args.lr_scheduler_type)}
        classes = classes_of(type(model).__name__, getattr(model, "config", None))
        if classes:     # the loss at chance is ln(classes): the daemon's `chance` detector
            config["classes"] = classes
        # no preset named: TRL's online RL trainers' loss is not meant to fall (`RL_ARGS`);
        # a model loaded from pretrained weights is being fine-tuned
        origin = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        kind = ("rl" if type(args).__name__ in RL_ARGS else
                "finetuning" if origin else "pretraining")
        self.tracker = Tracker(endpoint=self.endpoint, run=self.run, preset=self.preset, kind=kind,
                               embedded=self.embedded, emitter=self.emitter, wandb=self.wandb,
                               on_alert=self._on_alert, config=config, monitor=self.monitor,
                               enabled=state.is_world_process_zero, all_ranks=True,
                               # a checkpoint resume (resume_from_checkpoint) goes on with the run
                               resume=getattr(state, "global_step", 0) > 0)
        if self.rewind is not None:
            self.rewind.attach(self.tracker.emitter)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        loss = logs.get("loss")
        if (self.tracker is not None and loss is not None and "train_loss" not in logs
                and state.global_step != self._sent_step):
            tokens = getattr(state, "num_input_tokens_seen", 0) or None   # when HF counts them
            mem = device_memory(self.memory_every, state.global_step) if self.memory_every else {}
            self.tracker.loss(state.global_step, loss, lr=_num(logs.get("learning_rate")),
                              grad_norm=_num(logs.get("grad_norm")), tokens=tokens,
                              gpus=args.world_size, **self.clock.take(), **mem)
        if self.tracker is not None and "train_loss" not in logs:   # not the end's summary
            # the rest of what HF logs (epoch, a custom metric...): eval_* goes with on_evaluate
            self.tracker.scalars(state.global_step, {k: v for k, v in logs.items()
                                                     if not k.startswith("eval_")}, skip=_SENT)
        return self._apply(control)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.tracker is not None and metrics:
            out = {}
            for key, val in metrics.items():
                name = key[len("eval_"):] if key.startswith("eval_") else key
                if _num(val) is not None and not name.endswith(("runtime", "per_second")):
                    out["val_loss" if name == "loss" else name] = float(val)
            if out:
                self.tracker.eval(state.global_step, **out)
        return self._apply(control)

    def on_save(self, args, state, control, **kwargs):
        if self.tracker is not None and self.analyze_checkpoints:
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            for name, fmt in _WEIGHT_FILES:
                path = os.path.join(folder, name)
                if os.path.exists(path):
                    self.tracker.checkpoint(state.global_step, path, format=fmt,
                                            epoch=int(state.epoch or 0))
                    break
        if self.rewind is not None:
            self.rewind.saved(state.global_step, os.path.join(args.output_dir,
                                                              f"checkpoint-{state.global_step}"))
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        self.clock.begin()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.end()
        raw, self._raw = self._raw, None
        if self.tracker is not None:
            if raw is not None and self.tracker.active and not bool(raw.isfinite()):  # one sync
                self._sent_step = state.global_step
                self.tracker.loss(state.global_step, float(raw))
            self.tracker.poll()
        if self.rewind is not None and self.rewind.pending is not None:
            self._rewind(state, kwargs)
        return self._apply(control)

    def _rewind(self, state, kw) -> None:
        model, opt, sched = kw.get("model"), kw.get("optimizer"), kw.get("lr_scheduler")
        if self._own_restore:
            self.rewind.restore = lambda folder: restore_checkpoint(folder, model, opt, sched)
        self.rewind.apply(state.global_step, optimizers=[opt] if opt is not None else [],
                          schedulers=[sched] if sched is not None else [])

    def _saw_forward(self, module, args, output) -> None:
        """Forward hook: add a training forward pass's raw loss to this step's sum."""
        if not module.training:
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is None or not hasattr(loss, "detach") or loss.numel() != 1:
            return
        loss = loss.detach().float().reshape(())
        self._raw = loss if self._raw is None else self._raw + loss

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        record = self.stop_record(state.global_step)
        if record is not None:   # for the gate: `wtwin monitor trainer_state.json --fail-on`
            state.log_history.append({"step": state.global_step, STOP_KEY: record})
            if state.is_world_process_zero:
                write_stop_record(args.output_dir, record)
        if self.tracker is not None:
            self.tracker.poll()
            self.tracker.close("stopped" if self.stop_alert is not None else "completed")

    # ---- alerts ----------------------------------------------------------------------
    def _on_alert(self, alert: dict) -> None:
        if not self._take(alert):
            return
        if self.stop_filter is not None and self.stop_filter.matches(alert):
            self._want_stop = True
            if self.stop_alert is None:
                self.stop_alert = alert
        if self.save_filter is not None and self.save_filter.matches(alert):
            self._want_save = True

    def _apply(self, control):
        if self._want_stop:
            control.should_training_stop = True
        if self._want_save:
            control.should_save = True
            self._want_save = False
        return control


def restore_checkpoint(folder: str, model, optimizer=None, scheduler=None) -> None:
    """Load a Trainer checkpoint folder's weights, ``optimizer.pt`` and ``scheduler.pt``."""
    import torch

    weights = next((os.path.join(folder, n) for n, _ in _WEIGHT_FILES
                    if os.path.exists(os.path.join(folder, n))), None)
    if weights is None:
        raise FileNotFoundError(f"wtwin Rewind: no model weights in {folder} (removed by "
                                "save_total_limit?)")
    if weights.endswith(".safetensors"):
        from safetensors.torch import load_file

        sd = load_file(weights)
    else:
        sd = torch.load(weights, map_location="cpu", weights_only=True)
    res = model.load_state_dict(sd, strict=False)    # tied weights are saved once
    if res.unexpected_keys or len(res.missing_keys) * 2 > len(sd):
        raise RuntimeError(f"wtwin Rewind: the weights in {folder} do not fit this model")
    for name, obj in (("optimizer.pt", optimizer), ("scheduler.pt", scheduler)):
        path = os.path.join(folder, name)
        if obj is not None and os.path.exists(path):
            obj.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))


# on_log's keys sent with the loss event
_SENT = frozenset(("loss", "learning_rate", "grad_norm", "num_input_tokens_seen"))


def _num(x) -> float | None:
    """``float(x)``, or None for what is not a number (NaN and inf are kept)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v


def _plain(value) -> str:
    """An enum's value (``linear``), not its repr-like str (``SchedulerType.LINEAR``)."""
    return str(getattr(value, "value", value))

