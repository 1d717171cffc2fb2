"""The one retry policy: classify an attempt, then back off with full jitter.

Sinks never retry by themselves. A sink's ``send`` either returns (success) or
raises; ``classify`` sorts the failure into one of three verdicts, the way vector's
``RetryLogic`` does:

- ``RETRY``: connection errors, timeouts, HTTP 408, 429 (honouring ``Retry-After``)
  and 5xx except 501;
- ``PERMANENT``: every other 4xx, 501, anything unexpected: dead-lettered at once;
- ``DISABLE``: the endpoint is gone for good (the sink said so; Slack 404/410 and
  ``no_service``): the sink stops and its pending alerts are dead-lettered.

``RetryPolicy.decide(attempts, error)`` returns a ``Decision``: retry after ``delay``
seconds, or give up (dead letter) once ``max_attempts`` attempts were made. It is the
one retry decision: the delivery worker (``sinks.worker``) asks it after every failed
attempt, passing the sink's consecutive failures as the backoff ``step`` so that a dead
endpoint backs off as a whole, whatever fresh alerts arrive.
Backoff is "full jitter" (AWS architecture blog): ``uniform(0, min(cap, base * 2**n))``;
a server's ``Retry-After`` replaces it, capped at ``max_retry_after_s``.

>>> import random
>>> p = RetryPolicy(max_attempts=3, base_s=1.0, cap_s=10.0)
>>> p.decide(1, SinkError("busy", status=503), rng=random.Random(0)).action
'retry'
>>> p.decide(3, SinkError("busy", status=503)).action
'dead'
>>> p.decide(1, SinkError("slow down", status=429, retry_after=7.0)).delay
7.0
>>> p.decide(1, SinkError("bad", status=400)).action
'dead'
"""

from __future__ import annotations

import asyncio
import email.utils
import random
from dataclasses import dataclass

import aiohttp

from wtwin.detect.errors import check, positive, require

from .errors import SinkError
from .redact import redact_url

RETRY = "retry"
PERMANENT = "permanent"
DISABLE = "disable"

_RETRIABLE_STATUS = frozenset({408, 429})


def classify_status(status: int) -> str | None:
    """None for success (2xx); else RETRY or PERMANENT."""
    if 200 <= status < 300:
        return None
    if status in _RETRIABLE_STATUS or (500 <= status < 600 and status != 501):
        return RETRY
    return PERMANENT


def classify(error: BaseException) -> str:
    """Verdict for a failed attempt (``send`` raised ``error``)."""
    if isinstance(error, SinkError):
        if error.disable:
            return DISABLE
        if error.status is None:
            return RETRY  # the sink saw a transport-level failure
        return classify_status(error.status) or PERMANENT
    if isinstance(error, (aiohttp.ClientConnectionError, asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return RETRY
    if isinstance(error, aiohttp.ClientPayloadError):
        return RETRY
    return PERMANENT


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class Decision:
    """``action`` is ``retry`` (wait ``delay`` s), ``dead`` or ``disable``."""

    action: str
    delay: float = 0.0
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Full-jitter exponential backoff with caps and a bounded number of attempts.

    Defaults: 15 attempts, 1 s base, 300 s cap: the expected wait before a dead letter
    is about 20 minutes (at most about 40), so a short outage costs nothing.
    """

    max_attempts: int = 15
    base_s: float = 1.0
    cap_s: float = 300.0
    max_retry_after_s: float = 300.0

    def __post_init__(self) -> None:
        check(isinstance(self.max_attempts, int) and not isinstance(self.max_attempts, bool)
              and self.max_attempts >= 1, "retry.max_attempts", self.max_attempts, "an int >= 1")
        for name in ("base_s", "cap_s", "max_retry_after_s"):
            positive(f"retry.{name}", getattr(self, name))
        require(self.cap_s >= self.base_s,
                f"retry.cap_s ({self.cap_s}) must be >= retry.base_s ({self.base_s})")

    def backoff(self, attempts: int, rng: random.Random | None = None) -> float:
        """Full jitter: uniform(0, min(cap, base * 2**(attempts-1)))."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(max(attempts - 1, 0), 62))
        return (rng or random).uniform(0.0, ceiling)

    def delay(self, attempts: int, error: BaseException, rng: random.Random | None = None) -> float:
        """Seconds before the next attempt: the server's Retry-After (capped), else backoff."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return min(float(retry_after), self.max_retry_after_s)
        return self.backoff(attempts, rng)

    def exhausted(self, attempts: int) -> bool:
        """No attempt left after ``attempts``."""
        return attempts >= self.max_attempts

    def decide(self, attempts: int, error: BaseException, rng: random.Random | None = None, *,
               step: int | None = None) -> Decision:
        """What to do after ``attempts`` attempts, the last of which raised ``error``;
        the delay is the backoff of ``step`` (default: ``attempts``)."""
        verdict = classify(error)
        reason = describe(error)
        if verdict == DISABLE:
            return Decision("disable", reason=reason)
        if verdict == PERMANENT or self.exhausted(attempts):
            return Decision("dead", reason=reason)
        return Decision("retry", self.delay(step or attempts, error, rng), reason)


def describe(error: BaseException) -> str:
    """A short, log-friendly description of a failed attempt, URLs cut to their host
    (it goes to the log, ``alerts ls`` and ``/api/alerts/dead``; a webhook URL is a secret)."""
    if isinstance(error, SinkError):
        status = f"HTTP {error.status}: " if error.status is not None else ""
        return redact_url(f"{status}{error}")[:300]
    text = str(error) or type(error).__name__
    return redact_url(f"{type(error).__name__}: {text}")[:300]
