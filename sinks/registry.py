"""Sink registry: config ``type`` -> (config dataclass, sink class); module name = key.

``AnySinkConfig`` is the tagged union of the sink configs: the daemon's config loader
(``wtwin.daemon.config.load``, the one config walker) picks the class by a ``[[sinks]]``
table's ``type``. ``check_sinks`` checks what no single sink can (unique names, routes
that name known sinks); ``build_sinks(configs, env)`` resolves secret references
against ``env`` (the daemon's config module passes the environment) and returns live
sinks. With no ``[[sinks]]`` the log sink is the daemon's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from wtwin.detect.errors import check, positive

from .alertmanager import AlertmanagerConfig, AlertmanagerSink
from .base import Sink, SinkConfig
from .errors import ConfigError
from .log import LogConfig, LogSink
from .retry import RetryPolicy
from .routing import RouteConfig
from .slack import SlackConfig, SlackSink
from .webhook import WebhookConfig, WebhookSink

SINK_TYPES: dict[str, tuple[type, type]] = {
    "alertmanager": (AlertmanagerConfig, AlertmanagerSink),
    "log": (LogConfig, LogSink),
    "slack": (SlackConfig, SlackSink),
    "webhook": (WebhookConfig, WebhookSink),
}
AnySinkConfig = Union[tuple(cfg for cfg, _ in SINK_TYPES.values())]  # tagged by ``type``


@dataclass(frozen=True, kw_only=True)
class DeliveryConfig:
    """``[delivery]``: the retry policy shared by all sinks and the intake bound."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    intake_size: int = 10_000
    drain_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        positive("intake_size", self.intake_size, integer=True)
        check(isinstance(self.drain_timeout_s, (int, float)) and not isinstance(self.drain_timeout_s, bool)
              and self.drain_timeout_s >= 0, "drain_timeout_s", self.drain_timeout_s, ">= 0 seconds")


def check_sinks(configs: Sequence[SinkConfig], routes: Sequence[RouteConfig] = ()) -> None:
    """At least one sink, names unique, and every route names configured sinks."""
    if not configs:
        raise ConfigError("sinks: at least one sink is needed (leave [[sinks]] out for the default log sink)")
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"sinks: name {dupes[0]!r} is used more than once")
    for i, route in enumerate(routes):
        unknown = [s for s in route.sinks if s not in names]
        if unknown:
            raise ConfigError(f"routes[{i}].sinks: unknown sink {unknown[0]!r} (configured: {names})")


def build_sinks(configs: Sequence[SinkConfig], env: Mapping[str, str]) -> list[Sink]:
    """Live sinks from configs; secret references resolved against ``env``."""
    out = [SINK_TYPES[cfg.type][1].build(cfg, env) for cfg in configs]
    slack_urls: dict[str, str] = {}
    for sink in out:  # Slack's limit is 1 message/s per webhook; ours is per sink
        if isinstance(sink, SlackSink) and slack_urls.setdefault(sink._url, sink.name) != sink.name:
            raise ConfigError(f"sinks.{sink.name}: same webhook URL as sinks.{slack_urls[sink._url]}; "
                              "one sink per Slack webhook (its rate limit is per sink)")
    return out
