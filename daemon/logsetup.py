"""structlog configuration: JSON lines when stderr is not a TTY, console otherwise.

JSON lines are strict JSON: a non-finite float (a NaN loss is the most important value
there is) is written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, never as
the bare token Python's ``json`` writes, which ``jq`` and most log pipelines reject.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "auto", stream=None, shard: str | None = None) -> None:
    """``shard``: this daemon's shard name, put on every line (logs of many shards mixed in
    one place still say whose they are; docs/SHARDING.md)."""
    stream = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer = structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer(dumps)

    def add_shard(logger, method, event: dict) -> dict:
        event.setdefault("shard", shard)
        return event
    structlog.configure(
        processors=[
            ClientLogLimit(),
            *([add_shard] if shard is not None else []),
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )


def dumps(obj, **kw) -> str:
    """``json.dumps`` that never writes a bare NaN/Infinity (strict JSON)."""
    kw.setdefault("default", repr)
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:  # a non-finite float somewhere: spelled as a string
        return json.dumps(_finite(obj), allow_nan=False, **kw)


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


class RateLimited:
    """Log an event at most once per ``interval_s`` per key, with the count suppressed.

    Keys should come from a bounded set; past ``max_keys`` the oldest are forgotten,
    so a client cannot grow this table."""

    def __init__(self, log, interval_s: float = 10.0, clock=time.monotonic,
                 max_keys: int = 1024) -> None:
        self.log = log
        self.interval_s = interval_s
        self.clock = clock
        self.max_keys = max_keys
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, event: str, key: str, **kw) -> None:
        self._emit(self.log.warning, event, key, kw)

    def error(self, event: str, key: str, **kw) -> None:
        self._emit(self.log.error, event, key, kw)

    def _emit(self, method, event: str, key: str, kw: dict) -> None:
        now = self.clock()
        if now - self._last.get(key, -1e18) < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        if key not in self._last and len(self._last) >= self.max_keys:
            oldest = next(iter(self._last))
            del self._last[oldest]
            self._suppressed.pop(oldest, None)
        self._last[key] = now
        method(event, suppressed=self._suppressed.pop(key, 0), **kw)


CLIENT_EVENTS = frozenset({"run_started", "run_rewound", "run_expired"})  # one line per client event


class ClientLogLimit:
    """A structlog processor: the lines a client can make the daemon write, bounded.

    An event logged with ``_client`` (who caused it: the run's creator), or one of
    ``CLIENT_EVENTS``, passes at most ``per_s`` a second per (event, client) after a
    burst of ``burst``; the rest are dropped and counted, and the next line that passes
    says how many (``suppressed``). Strings longer than ``max_chars`` are cut (a 4 KiB
    run ``kind`` is not written out in full). ``_client`` itself is never written.
    The table of keys is bounded (``max_keys``, least recently used first)."""

    def __init__(self, per_s: float = 5.0, burst: float = 20.0, max_keys: int = 1024,
                 max_chars: int = 200, clock=time.monotonic) -> None:
        self.per_s, self.burst, self.max_keys, self.max_chars, self.clock = per_s, burst, max_keys, max_chars, clock
        self._buckets: dict = {}  # key -> (tokens, when, suppressed)
        self.dropped = 0

    def __call__(self, logger, method: str, event: dict) -> dict:
        client = event.pop("_client", None)
        name = event.get("event")
        if client is None and name not in CLIENT_EVENTS:
            return event
        key, now = (name, client), self.clock()
        tokens, when, suppressed = self._buckets.pop(key, (self.burst, now, 0))
        tokens = min(self.burst, tokens + (now - when) * self.per_s)
        if tokens < 1:
            self._buckets[key] = (tokens, now, suppressed + 1)
            self.dropped += 1
            raise structlog.DropEvent
        self._buckets[key] = (tokens - 1, now, 0)
        if len(self._buckets) > self.max_keys:
            del self._buckets[next(iter(self._buckets))]
        if suppressed:
            event["suppressed"] = suppressed
        for k, v in event.items():
            if isinstance(v, str) and len(v) > self.max_chars:
                event[k] = f"{v[: self.max_chars]}...[{len(v) - self.max_chars} more]"
        return event
