"""``build(config)``: the daemon's object graph, constructed in dependency order, once.

Read top to bottom, this is who depends on whom; nothing is set later and no component
reaches into another to add a hook. The per-event path the graph serves
(``Ingest.frame``, daemon/ingest.py):

    receiver -> ingest (admission, seq marks) -> run state -> detectors -> policy
             -> alert path (journal + snapshot commit) -> delivery -> sinks

The receiver is built first because everything that replies to a trainer sends on its
socket; it is handed the server's per-frame handler when it starts. Each Prometheus
collector is registered on the registry here, and each ``collect`` only reads:
eviction happens on the server's tick, never while scraping.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from wtwin.sinks.delivery import Delivery
from wtwin.sinks.metrics import DeliveryCollector
from wtwin.sinks.memory_outbox import MemoryOutbox

from .admission import Admission
from .alert_path import JOURNAL_SHARE, AlertPath, page_group
from .config import DaemonConfig, build_sinks
from .emitter_link import EmitterLink
from .incarnations import Incarnations
from .ingest import Ingest
from .jobs.service import JobsCollector, SpectralService, watch_factory
from .metrics import DaemonCollector
from .receiver import Receiver
from .restores import Restores
from .run_table import RunTable
from .snapshots import Snapshots
from .stats import Stats
from .store.metrics import StoreCollector
from .quarantine import Quarantine
from .references import References
from .store.store import Store


@dataclass(frozen=True, kw_only=True)
class Parts:
    config: DaemonConfig
    stats: Stats
    table: RunTable
    receiver: Receiver
    curve: object | None          # CurveGuard when [curve] is on
    store: Store                  # SQLite only (or nothing, with [state] off)
    link: EmitterLink
    snapshots: Snapshots
    restores: Restores
    delivery: Delivery
    alerts: AlertPath
    spectral: SpectralService
    admission: Admission
    ingest: Ingest
    registry: CollectorRegistry


def build(config: DaemonConfig) -> Parts:
    stats = Stats()
    store = Store(config.state, idle_after_s=config.runs.idle_ttl_s,
                  ended_after_s=max(config.runs.ended_ttl_s, config.runs.ended_series_s),
                  live=lambda: frozenset(r.run for r in table))  # the table, built next
    table = RunTable(preset=config.detection.preset, cooldown_s=config.detection.cooldown_s,
                     max_runs=config.runs.max_runs, new_watch=watch_factory(config.jobs),
                     keep_history=store.wanted,
                     max_kind_chars=config.runs.max_kind_chars, max_eval_metrics=config.runs.max_eval_metrics,
                     max_rewinds_kept=config.runs.max_rewinds_kept)
    curve = None
    if config.curve.enabled:  # zmq.auth only when it is used; a ConfigError early
        from .zmq_auth import CurveGuard

        curve = CurveGuard(config.curve)
    receiver = Receiver(config.listen, user_ids=curve is not None)  # with CURVE, the key is the principal
    send = receiver.send
    link = EmitterLink(stats, send)
    snapshots = Snapshots(config.state, store, link, table, stats, Quarantine(stats, send))
    references = References(table, store, send, max_references=config.runs.max_references,
                            resolve_s=config.runs.reference_resolve_s, shared=config.runs.shared,
                            max_total_points=config.runs.max_reference_points)
    restores = Restores(store, table, stats, references)
    delivery = Delivery(sinks=build_sinks(config), outbox=store.outbox or MemoryOutbox(),
                        routes=config.routes, policy=config.delivery.retry,
                        intake_size=config.delivery.intake_size,
                        group_of=lambda alert: page_group(table.get(alert.run)))
    alerts = AlertPath(table, stats, send, store=store, snapshots=snapshots, delivery=delivery)
    receiver.journaling, receiver.journal_share = alerts.journaling, JOURNAL_SHARE  # alert_path.py
    spectral = SpectralService(config.jobs, table, publish=alerts.publish, send=send,
                               changed=snapshots.mark)
    admission = Admission(config.runs, table, stats, send, curve=curve is not None,
                          restore=restores.fill)
    incarnations = Incarnations(table, store, snapshots, admission)
    ingest = Ingest(stats=stats, table=table, admission=admission, link=link, restores=restores,
                    publish=alerts.publish, changed=snapshots.changed, submit=spectral.submit,
                    max_frame_bytes=config.listen.max_frame_bytes, references=references,
                    incarnations=incarnations)
    registry = CollectorRegistry(auto_describe=True)  # a name registered twice raises
    runs = config.runs
    for collector in (DaemonCollector(table, stats, max_series_runs=runs.max_series_runs,
                                      ended_series_s=runs.ended_series_s, shard=config.shard.name,
                                      budget=config),
                      JobsCollector(spectral.runner, table, max_series_runs=runs.max_series_runs),
                      receiver, StoreCollector(store, snapshots, restores, alerts),
                      DeliveryCollector(delivery), references, *([curve] if curve is not None else [])):
        registry.register(collector)
    return Parts(config=config, stats=stats, table=table, receiver=receiver, curve=curve, store=store,
                 link=link, snapshots=snapshots, restores=restores, delivery=delivery, alerts=alerts,
                 spectral=spectral, admission=admission, ingest=ingest, registry=registry)
