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
from wtwin.detect.errors import check
from .base import SinkBase, SinkConfig


@dataclass(frozen=True, kw_only=True)
class LogConfig(SinkConfig):
    """``[[sinks]] type = "log"``."""

    type: str = field(default="log", init=False)
    name: str = "log"
    event: str = "alert"
    max_batch: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        check(isinstance(self.event, str) and bool(self.event), "event", self.event, "a non-empty string")


class LogSink(SinkBase):
    def __init__(self, config: LogConfig) -> None:
        super().__init__(config)
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
