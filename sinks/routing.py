"""Routes: which sinks get an alert, and after how long.

A route matches an alert by ``kinds`` (empty = any), ``severities`` (default
``warning`` and ``critical``: an ``info`` finding goes out only where a route names
``info``) and a run-name glob (``fnmatch``), and sends it to ``sinks``. Routes are tried
in order; the first match wins unless it sets ``continue_matching`` (Alertmanager's
``continue``). With no routes at all, every warning and critical alert goes to every
sink, and ``info`` stays on the run page, the metrics and the trainer's ``on_alert``.

``for_s`` holds a firing alert that long from its ``started_at`` (like a Prometheus
rule's ``for:``): its outbox rows are committed at once, due at the end of the hold, so
a hold survives a restart. A resolve while a sink's firing row is still held cancels
that row and sends nothing there; a severity upgrade during the hold replaces the held
row and keeps the hold's end. A resolved alert goes exactly where its episode's firings
went (``paired``): the outbox applies ``settle`` to the rows it holds for them, in the
same transaction that commits the alert.

The router is pure and keeps no state: ``route(alert, now)`` returns a ``Plan``.
Deduplication and cooldown are the alert policy's (``wtwin.detect.policy``), which
emits a firing only for a new episode or a severity upgrade.

>>> r = Router([RouteConfig(sinks=("slack",), for_s=60.0)], all_sinks=("slack",))
>>> a = Alert(run="r1", kind="drift", severity="warning", status="firing", step=5, started_at=0.0)
>>> dict(r.route(a, now=0.0).due)
{'slack': 60.0}
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from typing import Mapping, Sequence

from wtwin.detect.alert import KINDS, SEVERITIES, Alert
from wtwin.detect.errors import check, require


# What a route sends when it names no severities: pages only; `info` is asked for by name.
DEFAULT_SEVERITIES = ("warning", "critical")


@dataclass(frozen=True, kw_only=True)
class RouteConfig:
    """``[[routes]]``: match -> sinks, with a hold (``for_s``)."""

    sinks: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    severities: tuple[str, ...] = DEFAULT_SEVERITIES
    runs: str = "*"
    for_s: float = 0.0
    continue_matching: bool = False

    def __post_init__(self) -> None:
        for name in ("sinks", "kinds", "severities"):
            value = getattr(self, name)
            check(not isinstance(value, str) and all(isinstance(v, str) for v in value),
                  f"routes.{name}", value, "a list of strings")
            object.__setattr__(self, name, tuple(value))
        require(bool(self.sinks), "routes.sinks must name at least one sink")
        require(bool(self.severities), "routes.severities must name at least one severity "
                "(leave it out for warning and critical; add \"info\" to send info too)")
        _check_known("kinds", self.kinds, KINDS)
        _check_known("severities", self.severities, SEVERITIES)
        check(isinstance(self.runs, str) and bool(self.runs), "routes.runs", self.runs, "a non-empty glob")
        value = self.for_s
        check(not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < 1e9,
              "routes.for_s", value, "a number of seconds >= 0")
        check(isinstance(self.continue_matching, bool), "routes.continue_matching",
              self.continue_matching, "true or false")

    def matches(self, alert: Alert) -> bool:
        return (
            (not self.kinds or alert.kind in self.kinds)
            and alert.severity in self.severities
            and fnmatch.fnmatchcase(alert.run, self.runs)
        )


def _check_known(field: str, values: tuple[str, ...], known: tuple[str, ...]) -> None:
    bad = next((v for v in values if v not in known), None)
    require(bad is None, f"routes.{field}: unknown {bad!r}, expected one of {known}")


_RANK = {s: i for i, s in enumerate(SEVERITIES)}
Facts = tuple[int, str, int, float]  # an existing row: (id, state, attempts, next_attempt_at)


@dataclass(frozen=True)
class Plan:
    """Where one alert transition goes: ``due`` per sink (now, or the end of a hold).

    ``episode``: idempotency keys of the episode's firings (other than this one); their
    rows still held at these sinks are cancelled. ``paired``: a resolve goes only to
    sinks where one of those firings was released."""

    alert: Alert
    due: Mapping[str, float]
    episode: tuple[str, ...] = ()
    paired: bool = False


def held(row: Facts, now: float) -> bool:
    """A row in its for_s hold: pending, never tried, due later."""
    _id, state, attempts, due = row
    return state == "pending" and attempts == 0 and due > now


def settle(plan: Plan, found: Mapping[str, Sequence[Facts]], now: float) -> tuple[list[int], dict[str, float]]:
    """Given the rows the episode's firings have at the plan's sinks (``found``), the row
    ids to cancel (still held) and where the alert is written, due when."""
    cancel, due = [], {}
    for sink, at in plan.due.items():
        rows = found.get(sink, ())
        waiting = [r[0] for r in rows if held(r, now)]
        cancel += waiting
        if not plan.paired or len(rows) > len(waiting):
            due[sink] = at
    return cancel, due


class Router:
    """Matching and holds: ``route`` says which sinks get an alert, due when."""

    def __init__(self, routes: Sequence[RouteConfig], all_sinks: Sequence[str]) -> None:
        self.routes = tuple(routes) or (RouteConfig(sinks=tuple(all_sinks) or ("log",)),)

    def _matching(self, alert: Alert) -> list[RouteConfig]:
        out = []
        for route in self.routes:
            if route.matches(alert):
                out.append(route)
                if not route.continue_matching:
                    break
        return out

    def route(self, alert: Alert, now: float) -> Plan:
        """The plan for one transition (no sinks: routed nowhere)."""
        if alert.status == "resolved":  # wherever the episode's firings went
            firings = [dataclasses.replace(alert, status="firing", ended_at=None, severity=s)
                       for s in SEVERITIES[:_RANK[alert.severity] + 1]]
            due = {s: now for f in firings for r in self._matching(f) for s in r.sinks}
            return Plan(alert, due, tuple(f.idempotency_key for f in firings), paired=True)
        due: dict[str, float] = {}
        for route in self._matching(alert):  # a hold runs from the episode's start
            at = max(now, alert.started_at + route.for_s) if route.for_s else now
            for sink in route.sinks:
                due[sink] = min(due.get(sink, at), at)
        others = tuple(dataclasses.replace(alert, severity=s).idempotency_key
                       for s in SEVERITIES if s != alert.severity)
        return Plan(alert, due, others)
