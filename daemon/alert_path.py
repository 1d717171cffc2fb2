"""Where an alert transition goes once a run's policy has raised it: ``publish``.

In order: counted (``wtwind_alerts_total``, firing only), sent back to the run's
trainers (their ``on_alert``), marked on the run's chart (``RunState.series``), routed
(``Delivery.route``: which sinks, when), journaled, then any ``listeners`` (tests watch
alerts there). Every source of alerts calls the same ``publish``: events (the ingest
path), the stall check on the tick, and spectral job results.

The journal is one operation: one ``synchronous=FULL`` transaction on the store's
writer thread holds the alert row (written once), its run's snapshot and its outbox
rows (``Store.commit_alert``), so the events re-sent after a crash resume just after the alert
and cannot raise it a second time under another idempotency key, and a committed alert
is never left unrouted: its rows are in the outbox, delivered on restart if not before.
One completion callback (``_journaled``) follows on the loop: the rows become due
(``Staged.rows``) and delivery wakes their sinks (``Delivery.committed``). A failed
transaction is tried again after ``RETRY_S``, without the snapshot (the run is still
dirty: the next flush writes it); then delivery holds the alert in memory and keeps
trying (``Delivery._hold``). With no store the same operation runs at once on the
memory outbox. A failure is counted and logged; the next step still runs.

**A client's share of the writer.** Each alert costs the writer thread a
``synchronous=FULL`` transaction's worth of work (about 1.5 ms), and the writer takes what
is queued in order: a client that opens a run per frame, each with a NaN, queued
faster than the writer committed, and another client's page waited its turn behind
seconds of them (the transactions grew to 1,900 alerts and 3 s each, 2026-12-07).
``journaling`` counts, per client (the run's creator: ``client_of``), the alert
transactions queued and not yet committed; while a client has ``JOURNAL_SHARE`` of them
and another client sends, the receiver drops its frames unread and tells it when to
send again (``Receiver._journal_full``, ``wtwind_frames_dropped_total{reason=
"journal_backlog"}``). The writer's queue then holds a few alerts per client, and a
page commits within a batch or two of its raising.
"""

from __future__ import annotations

import asyncio
from typing import Callable

import structlog

from wtwin.detect.alert import Alert
from wtwin.emitters import wire
from wtwin.sinks.delivery import Routed

from .admission import ANONYMOUS

log = structlog.get_logger("wtwind")

Listener = Callable[[Alert], None]
RETRY_S = (0.25, 0.5)  # a failed journal transaction is tried again after these (a busy disk)
# alert transactions one client may have queued for the writer while another client sends
# (a trainer's one NaN, or the few alerts of one frame, are far within it)
JOURNAL_SHARE = 4


def client_of(run):
    """Who is charged for ``run``'s alerts at the writer: the connection, or CURVE
    principal, that created it (admission.py); a run restored from the store without its
    creator is its owner's."""
    return run.creator if run.creator is not None else run.owner


def page_group(run) -> str:
    """Whose turn an alert of ``run`` takes at a sink (``Delivery``'s ``group_of``): the
    client that created the run (its CURVE key, else its connection), never the run's
    secret, which a client mints for free (issue 38: 1,000 runs with a secret each took
    1,000 turns to one trainer's one). Anonymous runs are ``anonymous:<client>`` (their
    smaller cap); a run restored from the store without its creator is its owner's."""
    if run is None:
        return "anonymous"
    who = client_of(run)
    who = who.hex() if isinstance(who, bytes) else str(who)
    return ("anonymous:" if run.owner in (None, ANONYMOUS) else "client:") + who


class AlertPath:
    def __init__(self, table, stats, send: Callable[[bytes, bytes], bool], *, store, snapshots,
                 delivery) -> None:
        self.table = table
        self.stats = stats
        self.send = send
        self.store = store
        self.snapshots = snapshots
        self.delivery = delivery
        self.listeners: list[Listener] = []
        self.journal_errors = 0  # journal transactions that failed (each tried again, then held)
        self.journaling: dict = {}  # client -> its alert transactions not committed yet

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
        try:
            routed = self.delivery.route(alert)
            durable = run is not None and self.store.durable
            row = self.snapshots.encode(run, "alert") if durable else None
            who = client_of(run) if durable else None
            self._journal(routed, row, 0, who)
            if who is not None:  # done on the loop later, never within the call (writer thread)
                self.journaling[who] = self.journaling.get(who, 0) + 1
        except Exception:
            self.stats.loop_errors += 1
            log.exception("alert_commit_failed", run=alert.run, kind=alert.kind)
        for listener in self.listeners:
            try:
                listener(alert)
            except Exception:
                self.stats.loop_errors += 1
                log.exception("alert_listener_failed", run=alert.run, kind=alert.kind)

    def _journal(self, routed: Routed, row: tuple | None, attempt: int, who=None) -> None:
        """The alert row, the run's snapshot ``row`` and the outbox rows: one transaction
        (``who``: the client it is counted against in ``journaling`` until it is done)."""
        if not self.store.durable:  # the memory outbox: applied now, nothing to retry
            try:
                res, err = (None, routed.staged.op(None)), None
            except Exception as exc:
                res, err = None, exc
            self._journaled(routed, res, err, len(RETRY_S), who)
            return
        self.store.commit_alert(row, routed.staged.op,
                                lambda res, err: self._journaled(routed, res, err, attempt, who))

    def _journaled(self, routed: Routed, res, err: BaseException | None, attempt: int, who=None) -> None:
        """On the loop, once the journal's transaction committed or failed."""
        alert = routed.plan.alert
        if err is not None and attempt < len(RETRY_S):
            self.journal_errors += 1
            log.warning("alert_commit_retry", run=alert.run, kind=alert.kind, error=str(err)[:300])
            asyncio.get_running_loop().call_later(RETRY_S[attempt], self._journal, routed, None, attempt + 1, who)
            return
        if who is not None:
            left = self.journaling.pop(who, 1) - 1
            if left > 0:
                self.journaling[who] = left
        rows = [] if err is not None else routed.staged.rows(res[1])[0]
        self.delivery.committed(routed, rows, err)
        if err is not None:
            if not routed.plan.due:  # with sinks, delivery holds it and keeps trying
                log.error("alert_not_journaled", run=alert.run, kind=alert.kind, error=str(err)[:300])
        elif res[0]:
            self.snapshots.write_failed(res[0])
