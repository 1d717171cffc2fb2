"""Log sink: every alert transition as one structlog event (the embedded default).

Event name ``alert``; fields run, kind, severity, status, step, loss, forecast, W,
fingerprint, idempotency_key, message. ``warning``/``critical`` firing alerts log at
WARNING, everything else at INFO: an alert is not an error of the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import structlog

from wtwin.detect.alert import Alert
from .base import check_name, check_positive
from .errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """``[[sinks]] type = "log"``."""

    type: str = field(default="log", init=False)  # the registry key, dumped back by --print-config
    name: str = "log"
    event: str = "alert"
    min_interval_s: float = 0.001
    max_batch: int = 100
    queue_size: int = 10_000

    def __post_init__(self) -> None:
        check_name("sinks.log", self.name)
        owner = f"sinks.{self.name}"
        if not isinstance(self.event, str) or not self.event:
            raise ConfigError(f"{owner}.event must be a non-empty string")
        check_positive(owner, "min_interval_s", self.min_interval_s)
        check_positive(owner, "max_batch", self.max_batch, integer=True)
        check_positive(owner, "queue_size", self.queue_size, integer=True)


class LogSink:
    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self.name = config.name
        self.max_batch = config.max_batch
        self.min_interval_s = config.min_interval_s
        self.linger_s = 0.0
        self.queue_size = config.queue_size
        self._log = structlog.get_logger("wtwin.sinks.log")

    @classmethod
    def build(cls, config: LogConfig, env: Mapping[str, str]) -> "LogSink":
        return cls(config)

    async def send(self, alerts: Sequence[Alert]) -> None:
        for a in alerts:
            loud = a.status == "firing" and a.severity != "info"
            emit = self._log.warning if loud else self._log.info
            emit(
                self.config.event, sink=self.name, run=a.run, kind=a.kind, severity=a.severity,
                status=a.status, step=a.step, loss=a.loss, forecast=a.forecast, W=a.W,
                fingerprint=a.fingerprint, idempotency_key=a.idempotency_key, message=a.message,
            )

    async def healthcheck(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None
