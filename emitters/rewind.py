"""`Rewind`: closed-loop recovery from a loss spike, the recipe large runs do by hand.

On a matching alert (by default a firing *critical* ``spike`` or ``divergence``) it picks
the newest checkpoint saved at or before ``alert step - lookback`` (the alert's step is
when it fired; a divergence fires some tens of steps after its onset, so the default
``lookback`` of 100 steps reaches back before it), and at the trainer's next
``apply()``:

1. restores that checkpoint (``restore(checkpoint)``: model, optimizer, scheduler);
2. skips the batch range: the data is *not* rewound, so the batches seen between the
   checkpoint and now (the ones that spiked) are never trained on again; the step counter goes
   back to the checkpoint's step, as for any resume;
3. optionally multiplies the learning rate by ``lr_scale`` (the optimizers' param groups
   and the schedulers' ``base_lrs``);
4. sends a ``rewind`` event to the daemon (the audit record, docs/PROTOCOL.md).

At most ``max_rewinds`` a run; a matching alert past the budget, or with no checkpoint
old enough, is refused, kept in ``refused`` with the reason and handed to ``on_refused``
(``Rewind(on_refused=StopTraining())`` stops instead). Off unless you add it: enable it
once the pages are trusted.

A plain loop::

    rewind = Rewind(restore=lambda path: load_everything(path), lr_scale=0.5)
    emit = wtwin.emitters.connect(run="gpt", on_alert=rewind)
    rewind.attach(emit)
    step = 0
    for batch in loader:                     # the loader is never rewound
        step += 1
        ...
        emit.loss(step, loss)
        if step % 50 == 0:
            rewind.saved(step, save_everything(step))
        if (plan := rewind.apply(step, optimizers=[opt], schedulers=[sched])) is not None:
            step = plan.to_step

The HF and Lightning callbacks take ``rewind=Rewind(...)`` and do all of this themselves.
Runs on the training thread, like every ``on_alert``; imports nothing.
"""

from __future__ import annotations

import collections
import os
from typing import Any, Callable, Iterable, NamedTuple

from .alert_filter import AlertFilter

DEFAULT_KINDS = ("spike", "divergence")
NOT_DISTRIBUTED = ("wtwin Rewind is off: under distributed training alerts reach rank 0 only, "
                   "and a rewind on one rank would split the model")


class RewindPlan(NamedTuple):
    alert: dict           # the alert that asked for it
    to_step: int          # the checkpoint's step: training continues from here
    checkpoint: Any       # what ``saved()`` was given (a path, a state dict...)
    from_step: int | None = None   # the step the trainer was at when it rewound
    count: int = 0        # 1 for the first rewind of the run


class Rewind(AlertFilter):
    def __init__(self, restore: Callable[[Any], Any] | None = None, *,
                 min_severity: str = "critical", kinds: Iterable[str] | None = DEFAULT_KINDS,
                 max_rewinds: int = 2, lookback: int = 100, lr_scale: float | None = None,
                 keep: int = 16, on_refused: Callable[[dict], Any] | None = None) -> None:
        super().__init__(min_severity, kinds)
        if not isinstance(max_rewinds, int) or max_rewinds < 1:
            raise ValueError(f"max_rewinds must be an int >= 1, got {max_rewinds!r}")
        if not isinstance(lookback, int) or lookback < 0:
            raise ValueError(f"lookback must be an int >= 0 (steps), got {lookback!r}")
        if lr_scale is not None and not 0 < lr_scale <= 1e3:
            raise ValueError(f"lr_scale must be in (0, 1000], got {lr_scale!r}")
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r}")
        self.restore = restore
        self.on_refused = on_refused
        self.max_rewinds = max_rewinds
        self.lookback = lookback
        self.lr_scale = lr_scale
        self.checkpoints: collections.deque[tuple[int, Any]] = collections.deque(maxlen=keep)
        self.pending: RewindPlan | None = None
        self.done: list[RewindPlan] = []
        self.refused: list[tuple[dict, str]] = []
        self.emitter = None
        self._seen: set = set()

    def attach(self, emitter) -> "Rewind":
        """Where the audit event goes (an `Emitter`; None: nowhere)."""
        self.emitter = emitter
        return self

    def saved(self, step: int, checkpoint: Any) -> None:
        """Record a checkpoint saved at ``step`` (after that step's update)."""
        cps = self.checkpoints
        while cps and cps[-1][0] >= step:   # a rewind went back past them: they are a future left
            cps.pop()
        cps.append((int(step), checkpoint))

    @property
    def left(self) -> int:
        return self.max_rewinds - len(self.done)

    def __call__(self, alert: dict) -> None:
        key = (alert.get("kind"), alert.get("started_at"), alert.get("step"))
        if self.pending is not None or key in self._seen or not self.matches(alert):
            return
        self._seen.add(key)
        if self.left <= 0:
            return self._refuse(alert, f"budget of {self.max_rewinds} rewind(s) spent")
        bound = int(alert.get("step") or 0) - self.lookback
        old = [c for c in self.checkpoints if c[0] <= bound]
        if not old:
            return self._refuse(alert, f"no checkpoint saved at or before step {bound}")
        step, ckpt = old[-1]
        self.pending = RewindPlan(alert, step, ckpt)

    def _refuse(self, alert: dict, why: str) -> None:
        self.refused.append((alert, why))
        if self.on_refused is not None:
            self.on_refused(alert)

    def apply(self, step: int, *, optimizers=(), schedulers=()) -> RewindPlan | None:
        """Carry out the pending rewind, if any, at the trainer's current ``step``.

        Returns the plan (continue from ``plan.to_step``), or None when nothing is pending."""
        plan, self.pending = self.pending, None
        if plan is None:
            return None
        if self.restore is not None:
            self.restore(plan.checkpoint)
        if self.lr_scale is not None:
            scale_lr(self.lr_scale, optimizers, schedulers)
        while self.checkpoints and self.checkpoints[-1][0] > plan.to_step:
            self.checkpoints.pop()
        plan = plan._replace(from_step=int(step), count=len(self.done) + 1)
        self.done.append(plan)
        self._audit(plan)
        return plan

    def _audit(self, plan: RewindPlan) -> None:
        send = getattr(self.emitter, "rewind", None)
        if send is None:
            return
        ck = plan.checkpoint
        name = os.path.basename(os.fspath(ck)) if isinstance(ck, (str, os.PathLike)) else None
        send(plan.to_step, plan.from_step, kind=plan.alert.get("kind"), checkpoint=name,
             lr_scale=self.lr_scale, count=plan.count)


def scale_lr(factor: float, optimizers=(), schedulers=()) -> None:
    """Multiply the lr of every param group, and the base lrs a scheduler computes from."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
    for sched in schedulers:
        sched = getattr(sched, "scheduler", sched)     # accelerate's wrapper
        if hasattr(sched, "base_lrs"):
            sched.base_lrs = [lr * factor for lr in sched.base_lrs]
