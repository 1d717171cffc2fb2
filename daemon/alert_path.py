"""Where an alert transition goes once a run's policy has raised it: ``publish``.

In order: counted (``wtwind_alerts_total``, firing only), sent back to the run's
trainers (their ``on_alert``), marked on the run's chart (``RunState.series``), routed
by delivery (``Delivery.stage``: which sinks, when) and committed with the run's
snapshot and its outbox rows in one FULL transaction (``Snapshots.on_alert``); sinks
see it once that has committed. Then any ``listeners`` (tests watch alerts there). A
failure is counted and logged; the next step still runs. Every source of alerts calls
the same ``publish``: events (``Server.handle_event``), the stall check on the tick,
and spectral job results.
"""

from __future__ import annotations

from typing import Callable

import structlog

from wtwin.detect.alert import Alert
from wtwin.emitters import wire

log = structlog.get_logger("wtwind")

Listener = Callable[[Alert], None]


class AlertPath:
    def __init__(self, table, stats, send: Callable[[bytes, bytes], bool], *, snapshots,
                 delivery) -> None:
        self.table = table
        self.stats = stats
        self.send = send
        self.snapshots = snapshots
        self.delivery = delivery
        self.listeners: list[Listener] = []

    def publish(self, alert: Alert) -> None:
        if alert.status == "firing":
            self.stats.alerts[(alert.kind, alert.severity)] += 1
        log.debug("alert_transition", run=alert.run, kind=alert.kind, severity=alert.severity,
                  status=alert.status, step=alert.step)  # the `log` sink reports it to people
        run = self.table.get(alert.run)
        if run is not None:
            frame = wire.reply("alert", **alert.to_dict())
            for identity in run.identities.values():
                self.send(identity, frame)
            run.series.mark(alert)
        try:  # routed now; journaled with its run's snapshot and its outbox rows, one FULL commit
            self.snapshots.on_alert(alert, self.delivery.stage(alert))
        except Exception:
            self.stats.loop_errors += 1
            log.exception("alert_commit_failed", run=alert.run, kind=alert.kind)
        for listener in self.listeners:
            try:
                listener(alert)
            except Exception:
                self.stats.loop_errors += 1
                log.exception("alert_listener_failed", run=alert.run, kind=alert.kind)
