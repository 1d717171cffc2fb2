"""Sink registry: config ``type`` -> (config dataclass, sink class); module name = key.

``parse_sink(table, where)`` turns one ``[[sinks]]`` TOML table into its frozen
config (unknown keys rejected with their dotted path); ``build_sinks(configs, env)``
resolves secret references against ``env`` (the daemon's config module passes the
environment) and returns live sinks. With no ``[[sinks]]`` the log sink is the
embedded default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .alertmanager import AlertmanagerConfig, AlertmanagerSink
from .base import Sink
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
SinkConfig = Any  # one of the config classes in SINK_TYPES


@dataclass(frozen=True, kw_only=True)
class DeliveryConfig:
    """``[delivery]``: the retry policy shared by all sinks and the intake bound."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    intake_size: int = 10_000
    drain_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.intake_size, bool) or not isinstance(self.intake_size, int) or self.intake_size < 1:
            raise ConfigError(f"intake_size: must be an int >= 1, got {self.intake_size!r}")
        if not isinstance(self.drain_timeout_s, (int, float)) or self.drain_timeout_s < 0:
            raise ConfigError(f"drain_timeout_s: must be >= 0 seconds, got {self.drain_timeout_s!r}")


def parse_sink(table: Mapping[str, Any], where: str = "sinks[0]") -> SinkConfig:
    """One ``[[sinks]]`` table -> its frozen config; ConfigError names the key."""
    if isinstance(table, SinkConfigTypes):
        return table
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(table).__name__}")
    kind = table.get("type")
    if kind not in SINK_TYPES:
        raise ConfigError(f"{where}.type: {kind!r} is not one of {sorted(SINK_TYPES)}")
    cls = SINK_TYPES[kind][0]
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in table.items():
        if key == "type":
            continue
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown key (known keys here: {', '.join(sorted(known))})")
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


SinkConfigTypes = tuple(cfg for cfg, _ in SINK_TYPES.values())


def parse_sinks(tables: Sequence[Mapping[str, Any]], routes: Sequence[RouteConfig] = ()) -> tuple:
    """All ``[[sinks]]`` (default: one log sink); checks names are unique and routes known."""
    configs = tuple(parse_sink(t, f"sinks[{i}]") for i, t in enumerate(tables)) or (LogConfig(),)
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"sinks: name {dupes[0]!r} is used more than once")
    for i, route in enumerate(routes):
        unknown = [s for s in route.sinks if s not in names]
        if unknown:
            raise ConfigError(f"routes[{i}].sinks: unknown sink {unknown[0]!r} (configured: {names})")
    return configs


def build_sinks(configs: Sequence[SinkConfig], env: Mapping[str, str]) -> list[Sink]:
    """Live sinks from configs; secret references resolved against ``env``."""
    out = []
    for cfg in configs:
        sink_cls = next(s for c, s in SINK_TYPES.values() if isinstance(cfg, c))
        out.append(sink_cls.build(cfg, env))
    slack_urls: dict[str, str] = {}
    for sink in out:  # Slack's limit is 1 message/s per webhook; ours is per sink
        if isinstance(sink, SlackSink) and slack_urls.setdefault(sink._url, sink.name) != sink.name:
            raise ConfigError(f"sinks.{sink.name}: same webhook URL as sinks.{slack_urls[sink._url]}; "
                              "one sink per Slack webhook (its rate limit is per sink)")
    return out
