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
