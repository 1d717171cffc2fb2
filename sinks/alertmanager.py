"""Alertmanager sink: posts alerts to Alertmanager's own API (``POST /api/v2/alerts``).

For teams that already route, silence and inhibit in Alertmanager: wtwind's alerts
arrive there as Prometheus's would (same ``alertname``s and labels as the shipped rules
and the webhook sink), so existing routes, silences and inhibitions apply. It is an
alternative to scraping wtwind with the shipped ``wtwin.runs`` rules, not an addition:
both would page twice (docs/SINKS.md).

A firing alert is posted with ``endsAt`` = now + ``firing_ttl_s``; its resolution is
posted with ``endsAt`` = when it resolved, which ends it in Alertmanager at once.
wtwind posts transitions only (Prometheus re-posts every evaluation), so
``firing_ttl_s`` is how long an alert stays firing if wtwind never says "resolved".
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from wtwin.detect.alert import Alert
from wtwin.detect.errors import ConfigError, positive
from .base import HttpClient, HttpSinkConfig, SinkBase, raise_for_status, run_link
from .secrets import check_ref, resolve
from .webhook import am_alert, rfc3339

RESERVED_HEADERS = frozenset({"content-type", "content-length", "authorization"})


@dataclass(frozen=True, kw_only=True)
class AlertmanagerConfig(HttpSinkConfig):
    """``[[sinks]] type = "alertmanager"``: ``url`` is Alertmanager's base URL;
    ``link_base_url`` makes each alert's generatorURL (the run's page)."""

    type: str = field(default="alertmanager", init=False)
    authorization_env: str | None = None  # the whole header value: "Bearer ..." or "Basic ..."
    authorization_file: str | None = None
    firing_ttl_s: float = 86_400.0
    max_batch: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ref("authorization", self.authorization_env, self.authorization_file, required=False)
        bad = sorted(k for k in self.headers if k.lower() in RESERVED_HEADERS)
        if bad:
            raise ConfigError(f"headers.{bad[0]} is set by the sink (use authorization_env/_file)")
        positive("firing_ttl_s", self.firing_ttl_s)


def postable(a: Alert, now: float, firing_ttl_s: float, link_base_url: str | None = None) -> dict[str, Any]:
    """One alert as Alertmanager's API takes it (``postableAlert``)."""
    item = am_alert(a, run_link(link_base_url, a.run) or "")
    ends = item["endsAt"] if a.status == "resolved" else rfc3339(max(now, a.started_at) + firing_ttl_s)
    out = {"labels": item["labels"], "annotations": item["annotations"],
           "startsAt": item["startsAt"], "endsAt": ends}
    if item["generatorURL"]:
        out["generatorURL"] = item["generatorURL"]
    return out


class AlertmanagerSink(SinkBase):
    """POSTs a batch of alerts to ``<url>/api/v2/alerts``."""

    def __init__(self, config: AlertmanagerConfig, url: str, authorization: str | None) -> None:
        super().__init__(config)
        self._base = url.rstrip("/")
        self._headers = {**config.headers, "Content-Type": "application/json"}
        if authorization:
            self._headers["Authorization"] = authorization
        self._http = HttpClient(config.timeout_s)

    @classmethod
    def build(cls, config: AlertmanagerConfig, env: Mapping[str, str]) -> "AlertmanagerSink":
        auth = resolve(f"sinks.{config.name}.authorization", config.authorization_env,
                       config.authorization_file, env)
        return cls(config, config.resolved_url(env), auth)

    def body(self, alerts: Sequence[Alert], now: float) -> bytes:
        items = [postable(a, now, self.config.firing_ttl_s, self.config.link_base_url) for a in alerts]
        return json.dumps(items, separators=(",", ":")).encode()

    async def send(self, alerts: Sequence[Alert]) -> None:
        status, text, retry_after = await self._http.post(
            self._base + "/api/v2/alerts", self.body(alerts, time.time()), self._headers)
        raise_for_status(f"alertmanager sink {self.name!r}", status, text, retry_after)

    async def healthcheck(self) -> bool:
        """Alertmanager's ``/-/ready`` answers 2xx."""
        try:
            status = await self._http.get(self._base + "/-/ready")
        except Exception:  # any transport failure means unhealthy; never raises
            return False
        return 200 <= status < 300

    async def aclose(self) -> None:
        await self._http.aclose()
