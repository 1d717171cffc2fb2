"""Routes: which sinks get an alert, after how long, and how often.

A route matches an alert by ``kinds``, ``severities`` (empty = any) and a run-name
glob (``fnmatch``), and sends it to ``sinks``. Routes are tried in order; the first
match wins unless it sets ``continue_matching`` (Alertmanager's ``continue``).
With no routes at all, every alert goes to every sink.

Per route and (run, kind):

- ``for_s``: a firing alert is held that long and sent only if still firing then
  (like a Prometheus rule's ``for:``); resolved within the hold, nothing is sent.
- ``cooldown_s``: after a firing alert was sent, another firing of the same (run,
  kind) within the cooldown is suppressed (and so is its resolved message).

A repeated firing of a (run, kind) already sent is dropped, unless its severity is
higher (an upgrade is sent again). A resolved alert goes exactly where its firing
went, whichever routes it would match itself. The router is pure
bookkeeping: the caller passes ``now``; ``due(now)`` releases matured holds.

>>> r = Router([RouteConfig(sinks=("slack",), for_s=60.0)], all_sinks=("slack",))
>>> a = Alert(run="r1", kind="drift", severity="warning", status="firing", step=5, started_at=0.0)
>>> r.offer(a, now=0.0), [s for _, s in r.due(now=61.0)]
([], [('slack',)])
"""

from __future__ import annotations

import fnmatch
import heapq
from dataclasses import dataclass
from typing import Sequence

from wtwin.detect.alert import KINDS, SEVERITIES, Alert
from .errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class RouteConfig:
    """``[[routes]]``: match -> sinks, with a hold (``for_s``) and a cooldown."""

    sinks: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    runs: str = "*"
    for_s: float = 0.0
    cooldown_s: float = 0.0
    continue_matching: bool = False

    def __post_init__(self) -> None:
        for name in ("sinks", "kinds", "severities"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"routes.{name} must be a list of strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.sinks:
            raise ConfigError("routes.sinks must name at least one sink")
        _check_known("kinds", self.kinds, KINDS)
        _check_known("severities", self.severities, SEVERITIES)
        if not isinstance(self.runs, str) or not self.runs:
            raise ConfigError(f"routes.runs must be a non-empty glob, got {self.runs!r}")
        for name in ("for_s", "cooldown_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
                raise ConfigError(f"routes.{name} must be a number of seconds >= 0, got {value!r}")
        if not isinstance(self.continue_matching, bool):
            raise ConfigError("routes.continue_matching must be true or false")

    def matches(self, alert: Alert) -> bool:
        return (
            (not self.kinds or alert.kind in self.kinds)
            and (not self.severities or alert.severity in self.severities)
            and fnmatch.fnmatchcase(alert.run, self.runs)
        )


def _check_known(field: str, values: tuple[str, ...], known: tuple[str, ...]) -> None:
    bad = [v for v in values if v not in known]
    if bad:
        raise ConfigError(f"routes.{field}: unknown {bad[0]!r}, expected one of {known}")


Key = tuple[int, str, str]  # (route index, run, kind)
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


class Router:
    """Holds, cooldowns and the firing -> resolved pairing, per route and (run, kind)."""

    def __init__(self, routes: Sequence[RouteConfig], all_sinks: Sequence[str]) -> None:
        self.routes = tuple(routes) or (RouteConfig(sinks=tuple(all_sinks) or ("log",)),)
        self._held: dict[Key, tuple[Alert, float]] = {}
        self._heap: list[tuple[float, Key]] = []  # release times of holds (lazy deletion)
        self._sent: dict[Key, Alert] = {}
        self._last_sent: dict[Key, float] = {}
        self._next_prune = 0.0
        self.suppressed = 0

    def _matching(self, alert: Alert) -> list[int]:
        out = []
        for i, route in enumerate(self.routes):
            if route.matches(alert):
                out.append(i)
                if not route.continue_matching:
                    break
        return out

    def offer(self, alert: Alert, now: float) -> list[tuple[Alert, tuple[str, ...]]]:
        """Route one transition; returns what to send now as (alert, sinks)."""
        sinks: list[str] = []
        if alert.status == "resolved":  # wherever its firing went, whatever the routes match now
            for i in range(len(self.routes)):
                sinks += self._resolve((i, alert.run, alert.kind))
        else:
            for i in self._matching(alert):
                sinks += self._fire((i, alert.run, alert.kind), alert, now)
        return [(alert, tuple(dict.fromkeys(sinks)))] if sinks else []

    def _fire(self, key: Key, alert: Alert, now: float) -> tuple[str, ...]:
        route = self.routes[key[0]]
        if key in self._sent:  # already firing: only a severity upgrade goes out again
            if _RANK[alert.severity] > _RANK[self._sent[key].severity]:
                return self._release(key, alert, now)
            return ()
        if key in self._held:
            held, at = self._held[key]
            if _RANK[alert.severity] > _RANK[held.severity]:
                self._held[key] = (alert, at)  # the hold keeps its start, the upgrade its severity
            return ()
        last = self._last_sent.get(key)
        if last is not None and now - last < route.cooldown_s:
            self.suppressed += 1
            return ()
        if route.for_s > 0:
            self._held[key] = (alert, now + route.for_s)
            heapq.heappush(self._heap, (now + route.for_s, key))
            return ()
        return self._release(key, alert, now)

    def _release(self, key: Key, alert: Alert, now: float) -> tuple[str, ...]:
        self._sent[key] = alert
        self._last_sent[key] = now
        return self.routes[key[0]].sinks

    def _resolve(self, key: Key) -> tuple[str, ...]:
        if self._held.pop(key, None) is not None:
            return ()  # resolved within for_s: never sent, nothing to resolve
        if self._sent.pop(key, None) is not None:
            return self.routes[key[0]].sinks
        return ()

    def due(self, now: float) -> list[tuple[Alert, tuple[str, ...]]]:
        """Release holds whose ``for_s`` has passed; forget expired cooldowns."""
        out: dict[str, tuple[Alert, list[str]]] = {}
        while self._heap and self._heap[0][0] <= now:
            at, key = heapq.heappop(self._heap)
            if key not in self._held or self._held[key][1] != at:
                continue  # resolved during its hold, or held again since
            alert, _ = self._held.pop(key)
            entry = out.setdefault(alert.idempotency_key, (alert, []))
            entry[1].extend(self._release(key, alert, now))
        if now >= self._next_prune:  # forget expired cooldowns, at most every 10 s
            self._next_prune = now + 10.0
            for key, at in list(self._last_sent.items()):
                if key not in self._sent and now - at >= self.routes[key[0]].cooldown_s:
                    del self._last_sent[key]
        return [(a, tuple(dict.fromkeys(s))) for a, s in out.values()]

    def next_due(self) -> float | None:
        while self._heap and (self._heap[0][1] not in self._held or self._held[self._heap[0][1]][1] != self._heap[0][0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None
