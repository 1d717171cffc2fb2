"""Ready-made ``on_alert`` callbacks: stop training, save a checkpoint, rewind, chain several.

Each is a plain callable taking the alert dict (fields of ``Alert.to_dict()``), run on the
training thread at the next emit, optimizer step or ``poll()``::

    stop = StopTraining()                                  # critical alerts by default
    emit = wtwin.emitters.connect(run="gpt", on_alert=chain(
        SaveCheckpoint(lambda alert: torch.save(model.state_dict(), f"ckpt-{alert['step']}.pt")),
        stop))
    for step, batch in enumerate(loader):
        ...
        if stop:                                           # truthy once an alert matched
            break

Only ``firing`` alerts match (a ``resolved`` one never triggers an action). `Rewind`
(closed-loop recovery: restore an earlier checkpoint, skip the batches, optionally lower
the lr) is in `wtwin.emitters.rewind` and exported here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .alert_filter import AlertFilter
from .rewind import Rewind, RewindPlan

class StopTraining(AlertFilter):
    """Truthy once a matching alert arrived; ``alert`` holds the one that tripped it."""

    def __init__(self, min_severity: str = "critical", kinds: Iterable[str] | None = None) -> None:
        super().__init__(min_severity, kinds)
        self.alert: dict | None = None

    def __call__(self, alert: dict) -> None:
        if self.alert is None and self.matches(alert):
            self.alert = alert

    def __bool__(self) -> bool:
        return self.alert is not None

    @property
    def requested(self) -> bool:
        return self.alert is not None


class SaveCheckpoint(AlertFilter):
    """Calls ``save(alert)`` once per firing (run, kind) alert that matches.

    ``save`` does the framework's saving (``torch.save``, ``trainer.save_checkpoint``...);
    its return value (a path, say) is appended to ``saved``.
    """

    def __init__(self, save: Callable[[dict], Any], min_severity: str = "warning",
                 kinds: Iterable[str] | None = None) -> None:
        super().__init__(min_severity, kinds)
        self.save = save
        self.saved: list = []
        self._done: set = set()

    def __call__(self, alert: dict) -> None:
        key = (alert.get("run"), alert.get("kind"), alert.get("started_at"))
        if key in self._done or not self.matches(alert):
            return
        self._done.add(key)
        self.saved.append(self.save(alert))


def chain(*callbacks: Callable[[dict], Any]) -> Callable[[dict], None]:
    """One ``on_alert`` that calls each callback in order (``None`` entries skipped)."""
    cbs = [cb for cb in callbacks if cb is not None]

    def on_alert(alert: dict) -> None:
        for cb in cbs:
            cb(alert)

    return on_alert


__all__ = ["AlertFilter", "StopTraining", "SaveCheckpoint", "Rewind", "RewindPlan", "chain"]
