"""What every sink is: a config, ``send``, ``healthcheck``, ``aclose``.

A sink turns a batch of ``Alert`` values into one message and delivers it once:
``send`` returns on success and raises on failure (``SinkError`` for an answer,
aiohttp/timeout errors for transport); it never retries and never sleeps. The
delivery worker (``sinks.worker``) owns the queue, the rate limit and the retry
policy. ``max_batch`` is how many alerts one message may carry (Slack coalesces a
burst into one message; the webhook sends one alert per message so that
``webhook-id`` is the alert's idempotency key); ``min_interval_s`` is the sink's
rate limit (Slack: one message per second per webhook); ``linger_s`` how long
a fresh alert may wait for others of the same burst to join its message.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence
from urllib.parse import quote, urlsplit

import aiohttp

from wtwin.detect.alert import Alert
from wtwin.detect.errors import check, positive, require

from .errors import ConfigError, SinkError
from .redact import redact_url
from .retry import parse_retry_after
from .secrets import check_ref, resolve


class Sink(Protocol):
    name: str
    max_batch: int
    min_interval_s: float
    linger_s: float
    queue_size: int

    async def send(self, alerts: Sequence[Alert]) -> None: ...

    async def healthcheck(self) -> bool: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class SinkConfig:
    """What every ``[[sinks]]`` table has; each sink's config extends it.

    ``type`` is the registry key and the tag of the ``[[sinks]]`` union (the config
    loader picks the class by it; ``--print-config`` writes it back). The other five are
    what the delivery worker reads from every sink (see the module docstring); each sink
    sets its own defaults.
    """

    type: str = field(default="", init=False)
    name: str
    min_interval_s: float = 0.001
    max_batch: int = 1
    linger_s: float = 0.0
    queue_size: int = 10_000

    def __post_init__(self) -> None:
        name = self.name
        check(isinstance(name, str) and 0 < len(name) <= 64 and name.replace("-", "_").isidentifier(),
              "name", name, "1..64 characters of letters, digits, '_' or '-'")
        positive("min_interval_s", self.min_interval_s)
        positive("max_batch", self.max_batch, integer=True)
        check(isinstance(self.linger_s, (int, float)) and not isinstance(self.linger_s, bool)
              and 0 <= self.linger_s <= 10, "linger_s", self.linger_s, "between 0 and 10 seconds")
        positive("queue_size", self.queue_size, integer=True)


@dataclass(frozen=True, kw_only=True)
class HttpSinkConfig(SinkConfig):
    """What the sinks that POST to a URL given literally or by reference share (webhook,
    alertmanager): exactly one of ``url``/``url_env``/``url_file``, extra ``headers``,
    ``timeout_s``, and ``link_base_url`` (the run's page in each alert)."""

    url: str | None = None
    url_env: str | None = None
    url_file: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    link_base_url: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_url_ref(self)
        check_headers("headers", self.headers)
        object.__setattr__(self, "headers", dict(self.headers))
        positive("timeout_s", self.timeout_s)

    def resolved_url(self, env: Mapping[str, str]) -> str:
        """The literal URL, or the one its reference points at (checked: http or https)."""
        url = self.url or resolve(f"sinks.{self.name}.url", self.url_env, self.url_file, env)
        check_url(f"sinks.{self.name}.url (resolved)", url)
        return url


class SinkBase:
    """A sink's config and the five settings the delivery worker reads from it."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.name = config.name
        self.max_batch = config.max_batch
        self.min_interval_s = config.min_interval_s
        self.linger_s = config.linger_s
        self.queue_size = config.queue_size


def check_url(field: str, value: Any) -> None:
    """The value is never echoed: it may be a secret."""
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        shown = f"a {len(value)}-character string" if isinstance(value, str) else type(value).__name__
        raise ConfigError(f"{field} must be an http:// or https:// URL, got {shown} (not shown)")


def check_url_ref(cfg: Any) -> None:
    """Exactly one of ``url`` (literal, with no secret in it), ``url_env``, ``url_file``."""
    require(sum(x is not None for x in (cfg.url, cfg.url_env, cfg.url_file)) == 1,
            "url, url_env, url_file: set exactly one of url, url_env, url_file")
    if cfg.url is not None:
        check_url("url", cfg.url)
        require(not literal_secret_url(cfg.url), "url carries a secret (credentials, a query or a Slack hook); "
                "put it in the environment or a file: url_env or url_file")
    check_ref("url", cfg.url_env, cfg.url_file, required=False)


_SECRET_HEADER = re.compile(r"(?i)auth|token|secret|key|cookie|passw|signature|credential|api|session|access|private")
# a path segment that is a token: long, and letters mixed with digits (hook ids, keys)
_TOKEN_SEGMENT = re.compile(r"^(?=[^/]*[A-Za-z])(?=[^/]*\d)[A-Za-z0-9_\-.~]{20,}$")
_HOOK_HOSTS = ("hooks.slack.com", "discord.com", "discordapp.com", "webhook.office.com",
               "outlook.office.com", "api.telegram.org", "hooks.zapier.com")


def literal_secret_url(url: str) -> bool:
    """A literal URL that carries a secret: credentials, a query, a known webhook host
    (Slack, Discord, Teams, Telegram, Zapier), or a token in its path."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return bool(parts.username or parts.password or parts.query
                or any(host == h or host.endswith("." + h) for h in _HOOK_HOSTS)
                or any(_TOKEN_SEGMENT.match(seg) for seg in parts.path.split("/")))


def scrub(text: str, url: str, headers: Mapping[str, str]) -> str:
    """A receiver's answer with whatever secret we sent it removed (an error body that
    echoes the request would otherwise be stored and shown): the URL's path, query and
    credentials, and every header value; URLs then cut to their host."""
    parts = urlsplit(url)
    found = [parts.path, parts.query, parts.password or "", *parts.path.split("/"),
             *(v for k, v in headers.items() if k.lower() != "content-type")]
    for secret in sorted({f for f in found if len(f) >= 8}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return redact_url(text)


def secret_header(name: str) -> bool:
    return bool(_SECRET_HEADER.search(name))


def check_headers(field: str, headers: Any) -> None:
    require(isinstance(headers, Mapping), f"{field} must be a table of strings")
    for key, value in headers.items():
        require(isinstance(key, str) and isinstance(value, str) and "\n" not in key + value,
                f"{field}.{key} must be a single-line string")


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
            text = scrub((await resp.read())[:4096].decode("utf-8", "replace"), url, headers)
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
