"""Generic webhook sink: Alertmanager's webhook JSON (version "4"), Standard Webhooks signed.

Receivers written for Alertmanager work unchanged. Each message carries the headers
of the Standard Webhooks spec (https://www.standardwebhooks.com/):
``webhook-id`` (the alert's idempotency key: the same on every retry, so receivers
can drop duplicates), ``webhook-timestamp`` (Unix seconds of this attempt) and
``webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`` where
the key is the base64 part of a ``whsec_...`` secret, computed by the spec's own
``standardwebhooks`` library (the one receivers verify with). No secret, no signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from standardwebhooks.webhooks import Webhook

from wtwin.detect.alert import Alert
from .base import HttpClient, HttpSinkConfig, SinkBase, check_headers, check_url, raise_for_status, run_link, secret_header
from .errors import ConfigError
from .secrets import check_ref, resolve

ZERO_TIME = "0001-01-01T00:00:00Z"  # what Alertmanager sends as endsAt while firing
RESERVED_HEADERS = frozenset({"content-type", "content-length", "webhook-id", "webhook-timestamp", "webhook-signature"})
ALERTNAMES = {
    "drift": "WTwinLossDegradation",
    "plateau": "WTwinLossDegradation",
    "overfit": "WTwinLossDegradation",
    "divergence": "WTwinLossDivergence",
    "nonfinite": "WTwinLossNonFinite",
    "spike": "WTwinLossSpike",
    "stalled": "WTwinRunStalled",
    "spectral": "WTwinSpectralOutOfBand",
    "resume_jump": "WTwinResumeJump",
    "frozen_loader": "WTwinLossDegradation",
    "chance": "WTwinLossAtChance",
    "early_rise": "WTwinLossDivergence",
    "behind": "WTwinRunBehindReference",   # daemon/references.py
    "throughput": "WTwinRunSlowdown",
    "memory": "WTwinMemoryExhaustion",
}


@dataclass(frozen=True, kw_only=True)
class WebhookConfig(HttpSinkConfig):
    """``[[sinks]] type = "webhook"``. The URL may be literal or a reference."""

    type: str = field(default="webhook", init=False)
    secret_env: str | None = None
    secret_file: str | None = None
    headers_env: Mapping[str, str] = field(default_factory=dict)  # header name -> variable
    healthcheck_url: str | None = None
    external_url: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ref("secret", self.secret_env, self.secret_file, required=False)
        check_headers("headers_env", self.headers_env)
        secret = sorted(k for k in self.headers if secret_header(k))
        if secret:
            raise ConfigError(f"headers.{secret[0]} looks like a secret; give it by reference: "
                              f"headers_env = {{{secret[0]} = \"VARIABLE\"}}")
        bad = sorted(k for k in {**self.headers, **self.headers_env} if k.lower() in RESERVED_HEADERS)
        if bad:
            raise ConfigError(f"headers.{bad[0]} is set by the sink and cannot be overridden")
        object.__setattr__(self, "headers_env", dict(self.headers_env))
        if self.healthcheck_url is not None:
            check_url("healthcheck_url", self.healthcheck_url)


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fmt(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def am_alert(a: Alert, generator_url: str = "") -> dict[str, Any]:
    """One alert in Alertmanager's webhook shape; every label/annotation is a string."""
    labels = {**{str(k): str(v) for k, v in a.labels.items()}}
    labels.update(alertname=ALERTNAMES[a.kind], run=a.run, kind=a.kind, severity=a.severity)
    summary = f"{a.kind} on run {a.run} at step {a.step}"
    annotations = {
        "summary": summary,
        "description": a.message or summary,
        "details": a.details,
        "step": str(a.step),
        "loss": _fmt(a.loss),
        "forecast": _fmt(a.forecast),
        "W": _fmt(a.W),
        "idempotency_key": a.idempotency_key,
    }
    ends = rfc3339(a.ended_at) if a.status == "resolved" and a.ended_at is not None else ZERO_TIME
    return {
        "status": a.status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(a.started_at),
        "endsAt": ends,
        "generatorURL": generator_url,
        "fingerprint": a.fingerprint,
    }


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    first = dicts[0]
    return {k: v for k, v in first.items() if all(d.get(k) == v for d in dicts[1:])}


def payload(alerts: Sequence[Alert], *, receiver: str, external_url: str = "", link_base_url: str | None = None) -> dict:
    """The exact JSON document posted for a batch of alerts."""
    items = [am_alert(a, run_link(link_base_url, a.run) or "") for a in alerts]
    group = {k: v for k, v in _common([i["labels"] for i in items]).items() if k in ("run", "kind")}
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group.items())) + "}"
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": "firing" if any(a.status == "firing" for a in alerts) else "resolved",
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": _common([i["labels"] for i in items]),
        "commonAnnotations": _common([i["annotations"] for i in items]),
        "externalURL": external_url,
        "alerts": items,
    }


def signing_key(secret: str) -> bytes:
    """Decode a ``whsec_<base64>`` (or bare base64) secret; raises ConfigError."""
    raw = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("secret must be 'whsec_' followed by base64") from None
    if len(key) < 16:
        raise ConfigError("secret must decode to at least 16 bytes")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for this exact body (``standardwebhooks``)."""
    when = datetime.fromtimestamp(timestamp, timezone.utc)
    return Webhook(key).sign(msg_id, when, body.decode("utf-8"))


def message_id(alerts: Sequence[Alert]) -> str:
    if len(alerts) == 1:
        return alerts[0].idempotency_key
    return "wtw_" + hashlib.sha256("\x00".join(a.idempotency_key for a in alerts).encode()).hexdigest()[:24]


class WebhookSink(SinkBase):
    """POSTs one signed Alertmanager-shaped document per message."""

    def __init__(self, config: WebhookConfig, url: str, key: bytes | None) -> None:
        super().__init__(config)
        self._url = url
        self._key = key
        self._headers = dict(config.headers)  # plus headers_env, resolved in ``build``
        self._http = HttpClient(config.timeout_s)

    @classmethod
    def build(cls, config: WebhookConfig, env: Mapping[str, str]) -> "WebhookSink":
        owner = f"sinks.{config.name}"
        url = config.resolved_url(env)
        secret = resolve(f"{owner}.secret", config.secret_env, config.secret_file, env)
        try:
            key = signing_key(secret) if secret is not None else None
        except ConfigError as exc:
            raise ConfigError(f"{owner}.{exc}") from None
        sink = cls(config, url, key)
        sink._headers = {**config.headers, **{name: resolve(f"{owner}.headers_env.{name}", var, None, env)
                                              for name, var in config.headers_env.items()}}
        return sink

    def request(self, alerts: Sequence[Alert], now: float) -> tuple[bytes, dict[str, str]]:
        """Body and headers of one attempt (the signature covers this exact body)."""
        doc = payload(alerts, receiver=self.name, external_url=self.config.external_url,
                      link_base_url=self.config.link_base_url)
        body = json.dumps(doc, separators=(",", ":")).encode()
        msg_id, ts = message_id(alerts), int(now)
        headers = {**self._headers, "Content-Type": "application/json",
                   "webhook-id": msg_id, "webhook-timestamp": str(ts)}
        if self._key is not None:
            headers["webhook-signature"] = sign(self._key, msg_id, ts, body)
        return body, headers

    async def send(self, alerts: Sequence[Alert]) -> None:
        body, headers = self.request(alerts, time.time())
        status, text, retry_after = await self._http.post(self._url, body, headers)
        raise_for_status(f"webhook sink {self.name!r}", status, text, retry_after)

    async def healthcheck(self) -> bool:
        """GET ``healthcheck_url`` when configured (2xx = healthy), else True."""
        if self.config.healthcheck_url is None:
            return True
        try:
            status = await self._http.get(self.config.healthcheck_url)
        except Exception:  # any transport failure means unhealthy; never raises
            return False
        return 200 <= status < 300

    async def aclose(self) -> None:
        await self._http.aclose()
