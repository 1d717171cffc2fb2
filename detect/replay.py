"""One path from events to alerts: `RunMonitor` then `AlertPolicy`, for every caller.

The daemon (one event at a time, `observe_loss` / `observe_eval`), the offline CLI,
the web page's analysis and the in-process tracker (`Session`, `replay`) all go
through these functions, so a log gives the same alerts wherever it is replayed.

``now`` is the caller's clock (the daemon's wall clock); a replay without one passes
the event's index and a ``cooldown_s`` of 0 (no clock: no cooldown). `replay` yields
every event's state and alerts; `scan` (``wtwin monitor``: 10^6 events) gives only the
alert transitions and builds nothing per event around the monitor's own call.

>>> import random
>>> rng = random.Random(0)
>>> events = [("loss", t, 2.6 + 9 * t ** -0.35 + rng.gauss(0, 0.05)
...            + (1e-3 * (t - 5000) if t > 5000 else 0.0), None) for t in range(1, 8001)]
>>> [(a.kind, a.severity, a.status, a.step) for a in alerts(events)]
[('drift', 'info', 'firing', 5113), ('drift', 'warning', 'firing', 5135), ('drift', 'critical', 'firing', 5879), ('divergence', 'critical', 'firing', 6377)]
"""

from __future__ import annotations

from itertools import chain
from typing import Iterable, Iterator, NamedTuple

from .alert import Alert
from .finding import MonitorState
from .monitor import RunMonitor
from .policy import AlertPolicy

_UNTIMED = (None, None)     # a step ``times`` has nothing for (`scan`)

def _apply(policy: AlertPolicy, state: MonitorState, step: int, now: float,
           advance: bool) -> list[Alert]:
    kw = dict(loss=state.l_obs, forecast=state.l_pred, W=state.W)
    out = [a for f in state.findings if (a := policy.apply(f, now, **kw)) is not None]
    return out + policy.advance(step, now, **kw) if advance else out


def observe_loss(monitor: RunMonitor, policy: AlertPolicy, step: int, loss: float,
                 lr: float | None = None, grad_norm: float | None = None,
                 now: float = 0.0, ts: float | None = None, tokens: float | None = None,
                 timing: dict | None = None) -> tuple[MonitorState, list[Alert]]:
    """One loss event: the monitor's state and the alert transitions it caused (held
    resolves and cooled-down firings come due on every loss event); ``ts``, ``tokens``
    and ``timing``: the run's time and memory (`RunMonitor.update_loss`)."""
    state = monitor.update_loss(step, loss, lr, grad_norm, ts, tokens, timing)
    if not state.findings and policy.idle:   # `_apply` would return [] (most events)
        return state, []
    return state, _apply(policy, state, step, now, advance=True)


def observe_eval(monitor: RunMonitor, policy: AlertPolicy, step: int, metrics: dict,
                 now: float = 0.0) -> tuple[MonitorState | None, list[Alert]]:
    state = monitor.update_eval(step, metrics)
    if state is None:
        return None, []
    return state, _apply(policy, state, step, now, advance=False)


class Session:
    """One run's detection, event by event: ``loss``, ``eval``, ``end``."""

    def __init__(self, run: str = "run", preset: str = "pretraining", *,
                 cooldown_s: float = 0.0, **overrides) -> None:
        self.monitor = RunMonitor(preset, **overrides)
        self.policy = AlertPolicy(run, cooldown_s=cooldown_s)

    def loss(self, step: int, loss: float, lr: float | None = None,
             grad_norm: float | None = None, now: float = 0.0, ts: float | None = None,
             tokens: float | None = None, timing: dict | None = None
             ) -> tuple[MonitorState, list[Alert]]:
        return observe_loss(self.monitor, self.policy, step, loss, lr, grad_norm, now, ts,
                            tokens, timing)

    def eval(self, step: int, metrics: dict, now: float = 0.0) -> tuple[MonitorState | None, list[Alert]]:
        return observe_eval(self.monitor, self.policy, step, metrics, now)

    def end(self, step: int, now: float, status: str = "completed") -> list[Alert]:
        return self.policy.resolve_all(step, now, f"run ended ({status})")

    def snapshot(self) -> dict:
        return {"monitor": self.monitor.snapshot(), "policy": self.policy.snapshot()}

    def restore(self, snap: dict) -> None:
        self.monitor.restore(snap["monitor"])
        self.policy.restore(snap["policy"])


class Replayed(NamedTuple):
    kind: str                 # "loss" or "eval"
    step: int
    value: float
    lr: float | None
    state: MonitorState | None
    alerts: list
    grad_norm: float | None = None


def replay(events: Iterable[tuple], *, run: str = "log", preset: str = "pretraining",
           **overrides) -> Iterator[Replayed]:
    """Replay ``(kind, step, value, lr)`` or ``(kind, step, value, lr, grad_norm)`` events
    (``kind`` "loss" or "eval", as `wtwin.offline.logs.TrainingLog.events` gives them)
    through one `Session`."""
    s = Session(run, preset, **overrides)
    for i, (kind, step, value, lr, *rest) in enumerate(events):
        grad = rest[0] if rest else None
        if kind == "loss":
            state, out = s.loss(step, value, lr, grad, now=float(i))
        else:
            state, out = s.eval(step, {"val_loss": value}, now=float(i))
        yield Replayed(kind, step, value, lr, state, out, grad)


def scan(events: Iterable[tuple], *, run: str = "log", preset: str = "pretraining",
         series: list | None = None, times: dict | None = None,
         **overrides) -> tuple[list[Alert], int]:
    """`replay` for a caller that wants the alerts, not an object per event (a log of
    10^6 steps: the offline CLI): (every alert transition, the number of loss events).
    ``series``, a list: ``(step, loss, l_pred, band_lo, band_hi, W)`` is appended to it
    per loss event. ``times``: step -> ``(ts, timing)`` or ``(ts, timing, tokens)``, the run's time and memory
    (`RunMonitor.update_loss`; ``wtwin monitor --timing``). Same events, same transitions
    as `replay`."""
    s = Session(run, preset, **overrides)
    monitor, policy = s.monitor, s.policy
    update = monitor.update_loss        # the monitor's one call per loss event
    keep = series.append if series is not None else None
    out: list[Alert] = []
    n = 0
    idle = policy.idle          # read again after each call that can change the policy
    for i, (kind, step, value, lr, grad) in enumerate(_five(events)):
        if kind != "loss":
            out += s.eval(step, {"val_loss": value}, now=float(i))[1]
            idle = policy.idle
            continue
        n += 1
        if times is None:
            state = update(step, value, lr, grad)
        else:
            ts, timing, *tokens = times.get(step, _UNTIMED)
            state = update(step, value, lr, grad, ts, tokens[0] if tokens else None, timing)
        if state.findings or not idle:   # else `_apply` returns []: skip it
            out += _apply(policy, state, step, float(i), advance=True)
            idle = policy.idle
        if keep is not None:
            keep((step, value, state.l_pred, state.band_lo, state.band_hi, state.W))
    return out, n


def _five(events: Iterable[tuple]) -> Iterator[tuple]:
    """The events as 5-tuples (a stream is of one shape: its first event says which)."""
    it = iter(events)
    first = next(it, None)
    if first is None:
        return it
    if len(first) == 5:
        return chain((first,), it)
    return ((*e, None) for e in chain((first,), it))


def alerts(events: Iterable[tuple], **kw) -> list[Alert]:
    """Every alert transition of a replay."""
    return scan(events, **kw)[0]
