"""What every sink is: a config, ``send``, ``healthcheck``, ``aclose``.

A sink turns a batch of ``Alert`` values into one message and delivers it once:
``send`` returns on success and raises on failure (``SinkError`` for an answer,
aiohttp/timeout errors for transport); it never retries and never sleeps. The
delivery worker (``sinks.delivery``) owns the queue, the rate limit and the retry
policy. ``max_batch`` is how many alerts one message may carry (Slack coalesces a
burst into one message; the webhook sends one alert per message so that
``webhook-id`` is the alert's idempotency key); ``min_interval_s`` is the sink's
rate limit (Slack: one message per second per webhook); ``linger_s`` how long
a fresh alert may wait for others of the same burst to join its message.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Mapping, Protocol, Sequence
from urllib.parse import quote, urlsplit

import aiohttp

from wtwin.detect.alert import Alert
from .errors import ConfigError, SinkError
from .retry import parse_retry_after


class Sink(Protocol):
    name: str
    max_batch: int
    min_interval_s: float
    linger_s: float
    queue_size: int

    async def send(self, alerts: Sequence[Alert]) -> None: ...

    async def healthcheck(self) -> bool: ...

    async def aclose(self) -> None: ...


def check_name(owner: str, name: Any) -> None:
    if not isinstance(name, str) or not name or len(name) > 64 or not name.replace("-", "_").isidentifier():
        raise ConfigError(f"{owner}.name must be 1..64 chars of letters, digits, '_' or '-', got {name!r}")


def check_positive(owner: str, field: str, value: Any, *, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not (value > 0 and math.isfinite(value)):
        what = "an int" if integer else "a number"
        raise ConfigError(f"{owner}.{field} must be {what} > 0, got {value!r}")


def check_url(owner: str, field: str, value: Any) -> None:
    """The value is never echoed: it may be a secret (issue 15)."""
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        shown = f"a {len(value)}-character string" if isinstance(value, str) else type(value).__name__
        raise ConfigError(f"{owner}.{field} must be an http:// or https:// URL, got {shown} (not shown)")


_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*)://[^\s\"'<>]+")
_SECRET_HEADER = re.compile(r"(?i)auth|token|secret|key|cookie|passw|signature|credential")


def redact_url(text: str) -> str:
    """Every URL in ``text`` cut to scheme, host and port: no user, path or query."""
    return _URL.sub(lambda m: _host_only(m.group(0)), text)


def _host_only(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if _port(parts) else ""
    rest = "/..." if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{host}{port}{rest}"


def _port(parts) -> int | None:
    try:
        return parts.port
    except ValueError:
        return None


def literal_secret_url(url: str) -> bool:
    """A literal URL that carries a secret: credentials, a query, or a Slack hook."""
    parts = urlsplit(url)
    return bool(parts.username or parts.password or parts.query or "hooks.slack.com" in (parts.hostname or ""))


def secret_header(name: str) -> bool:
    return bool(_SECRET_HEADER.search(name))


def check_headers(owner: str, headers: Any) -> None:
    if not isinstance(headers, Mapping):
        raise ConfigError(f"{owner}.headers must be a table of strings")
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str) or "\n" in key + value:
            raise ConfigError(f"{owner}.headers.{key} must be a single-line string")


def run_link(base: str | None, run: str) -> str | None:
    """``{run}`` in the base is replaced; otherwise ``<base>/runs/<run>``."""
    if not base:
        return None
    if "{run}" in base:
        return base.replace("{run}", quote(run, safe=""))
    return f"{base.rstrip('/')}/runs/{quote(run, safe='')}"


class HttpClient:
    """One aiohttp session per sink, created lazily inside the running loop."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, str, float | None]:
        """POST; returns (status, body text, Retry-After seconds or None)."""
        async with self._get().post(url, data=body, headers=dict(headers), allow_redirects=False) as resp:
            text = (await resp.read())[:4096].decode("utf-8", "replace")
            return resp.status, text, parse_retry_after(resp.headers.get("Retry-After"), time.time())

    async def get(self, url: str) -> int:
        async with self._get().get(url, allow_redirects=False) as resp:
            await resp.read()
            return resp.status

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def raise_for_status(sink: str, status: int, text: str, retry_after: float | None) -> None:
    """Raise SinkError unless 2xx; classification is ``retry.classify``'s job."""
    if 200 <= status < 300:
        return
    raise SinkError(f"{sink}: HTTP {status} {text[:200]!r}", status=status, body=text, retry_after=retry_after)
