"""``wtwin monitor LOG --reference PATH``: the reference detector over a finished log.

Each ``--reference`` is read like the log itself (any format `read_log` reads; an
eval-only log is compared on its eval loss); the log's loss events go through one
`wtwin.detect.reference.ReferenceTracker` against all of them, and its ``behind``
findings through an `AlertPolicy` like the other detectors' (no clock offline: no
cooldown), so a behind page is listed beside the others.
"""

from __future__ import annotations

from pathlib import Path

from wtwin.detect.policy import AlertPolicy
from wtwin.detect.reference import BEHIND, ReferenceConfig, ReferenceCurve, ReferenceTracker

from .logs import LogError, read_log


def _points(log) -> tuple[list, list, list]:
    steps, losses, lrs = [], [], []
    for kind, step, value, lr, *_ in log.events():
        if kind == "loss" and value is not None:
            steps.append(step)
            losses.append(value)
            lrs.append(float("nan") if lr is None else lr)
    return steps, losses, lrs


def read_reference(path: str, loss_col: str | None = None) -> ReferenceCurve:
    """A reference run from a log file, named after the file (its stem)."""
    steps, losses, lrs = _points(read_log(path, loss_col=loss_col))
    has_lr = any(lr == lr for lr in lrs)
    try:
        return ReferenceCurve(Path(path).stem, steps, losses, lrs if has_lr else None)
    except ValueError as e:        # ConfigError: too few points
        raise LogError(f"{path}: cannot be a reference: {e}") from None


def behind(log, references: list[ReferenceCurve],
           config: ReferenceConfig = ReferenceConfig()) -> tuple[list[dict], dict]:
    """The ``behind`` alert transitions over ``log`` (firing and resolved, as dicts like
    `wtwin.offline.cli.monitor_log`'s) and a summary: the last verdict's fields."""
    tracker, policy = ReferenceTracker(references, config), AlertPolicy("offline", cooldown_s=0.0)
    out, prev, v = [], -1, None
    for i, (step, loss, lr) in enumerate(zip(*_points(log))):
        code = tracker.feed(step, loss, lr)
        if code == BEHIND or prev == BEHIND:
            v = tracker.verdict()
            f = v.finding()
            a = policy.apply(f, float(i), loss=loss) if f is not None else None
            out += [a] if a is not None else []
        if not policy.idle:
            out += policy.advance(step, float(i), loss=loss)
        prev = code
    v = tracker.verdict()
    alerts = [{"step": int(a.step), "kind": a.kind, "severity": a.severity, "message": a.message,
               "details": a.details, "status": a.status} for a in out]
    return alerts, {"state": v.state, "reference": v.reference, "gap": v.gap,
                    "units": v.units, "message": v.message}
