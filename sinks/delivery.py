"""Delivery: route each alert, commit it to the outbox, then one worker per sink sends it.

``route(alert)`` routes the transition at once (``sinks.routing``: which sinks, and a
``for_s`` hold as a row due later) and returns it as ``Routed``, with its outbox write
(``Outbox.stage``); the daemon's alert journal (``daemon/alert_path.py``) runs that
write in the FULL transaction that also holds the run's snapshot, and calls
``committed`` once it has committed (or failed). ``submit_nowait(alert)`` does both on
its own (tests, tools). Neither blocks: alerts whose transaction has not committed yet
are bounded by ``intake_size`` (beyond it: an ERROR and a counter, and the write holds
the alert row alone). Once committed, the rows' sinks' workers are woken
(``sinks/worker.py``: one task per sink, reading its own rows, so one slow or dead sink
never stalls detection or the other sinks); a sink's pending rows are its bounded
queue (``queue_size``; beyond it new rows are written dead as ``dropped``, counted and
redeliverable).

Pages first: each sink serves its pending rows one group (in the daemon, the client
that created the alert's run) at a time in turn, and holds at most ``group_cap`` pending
rows of one group (``anonymous_cap`` for a group named ``anonymous...``). A sink whose
queue is full makes room for a group smaller than the largest: the largest group's
newest row is written dead (``queue full``, counted, redeliverable), so a flood spread
over many runs or connections never shuts another client's page out. An alert whose outbox write
failed (a full disk) is held in memory, at most ``hold_size``, and written again with
backoff until it commits; then it is delivered (``_hold``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import structlog

from wtwin.detect.alert import Alert
from .base import Sink
from .delivery_queue import QUEUE_FULL, Outbox, Outcome, Row, Staged
from .retry import RetryPolicy
from .routing import Plan, RouteConfig, Router
from .worker import Counters, Worker

HELD_RETRY_S, HELD_RETRY_MAX_S = 1.0, 30.0  # a held alert's write is tried again after these
_log = structlog.get_logger("wtwin.sinks.delivery")


@dataclass(frozen=True)
class Routed:
    """One alert routed: its plan, the sinks whose queue was full, when, and its outbox
    write. ``counted``: it holds a place in the intake until ``Delivery.committed``."""

    plan: Plan
    full: frozenset[str]
    now: float
    staged: Staged
    counted: bool = True


class Delivery:
    """Router + outbox + one worker per sink; the daemon's single entry point."""

    def __init__(self, *, sinks: Sequence[Sink], outbox: Outbox, routes: Sequence[RouteConfig] = (),
                 policy: RetryPolicy | None = None, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, intake_size: int = 10_000,
                 group_of: Callable[[Alert], str] | None = None, group_cap: int = 1000,
                 anonymous_cap: int = 100, hold_size: int = 1000) -> None:
        """``group_of(alert)``: whose alert it is (the daemon: its run's principal). Each
        sink serves the groups in turn (``PendingIndex``) and holds at most ``group_cap``
        pending rows of one group, ``anonymous_cap`` of the group ``anonymous``: beyond,
        new rows are written dead (``queue full``: counted, redeliverable). ``hold_size``:
        alerts whose outbox write failed that wait in memory for the disk (``_hold``)."""
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"sink names must be unique, got {names}")
        self.sinks = {s.name: s for s in sinks}
        self.outbox, self.clock = outbox, clock
        self.router = Router(routes, names)
        unknown = sorted({n for r in self.router.routes for n in r.sinks} - set(names))
        if unknown:
            raise ValueError(f"routes name unknown sinks {unknown}; configured: {names}")
        self.counters = Counters(names)
        rng = rng or random.Random()
        self.workers = {s.name: Worker(s, outbox, policy or RetryPolicy(), self.counters, clock, rng) for s in sinks}
        self.group_of, self.group_cap, self.anonymous_cap = group_of, group_cap, anonymous_cap
        if group_of is not None:
            outbox.index.group_of = group_of  # the outbox's pending view groups by it
        self._staged_groups: dict[tuple[str, str], int] = {}  # (sink, group) -> rows not committed yet
        self._evicting: dict[int, tuple[str, str]] = {}  # row id -> (sink, group): written dead for room
        self.intake_size = intake_size  # alerts staged whose transaction has not committed yet
        self.held: deque[Plan] = deque()  # alerts whose write failed, retried (``_hold``)
        self.hold_size = hold_size
        self._retry: asyncio.TimerHandle | asyncio.Handle | None = None
        self._retry_s = HELD_RETRY_S
        self._staged = 0
        self._staged_rows = dict.fromkeys(names, 0)
        self._tasks: list[asyncio.Task] = []
        self._writes: set[asyncio.Future] = set()  # submit_nowait's writes in flight

    async def start(self) -> None:
        """Start the workers; rows left pending earlier are picked up."""
        self._tasks = [asyncio.create_task(w.run(), name=f"wtwin-sink-{n}") for n, w in self.workers.items()]

    def route(self, alert: Alert, now: float | None = None) -> Routed:
        """Hot path: route ``alert`` now, with its outbox write for the caller's
        transaction. With ``intake_size`` alerts already waiting for theirs (ERROR,
        counted) it goes to no sink: the write holds the alert row alone."""
        now = self.clock() if now is None else now
        if self._staged >= self.intake_size:
            self.counters.intake_dropped += 1
            _log.error("alert_dropped", reason="delivery intake full", run=alert.run, kind=alert.kind)
            plan = Plan(alert, {})
            return Routed(plan, frozenset(), now, self.outbox.stage([plan], now), counted=False)
        plan = self.router.route(alert, now)
        counts = self.outbox.counts()
        group = self._group(alert)
        full = frozenset(s for s in plan.due if self._group_full(s, group)
                         or not self._room(s, group, counts.get((s, "pending"), 0), now))
        self._staged += 1
        for sink in plan.due:
            self._staged_rows[sink] += 1
            self._staged_groups[(sink, group)] = self._staged_groups.get((sink, group), 0) + 1
        return Routed(plan, full, now, self.outbox.stage([plan], now, full=full))

    def _group(self, alert: Alert) -> str:
        return self.group_of(alert) if self.group_of is not None else ""

    def _group_full(self, sink: str, group: str) -> bool:
        """The group's pending rows for ``sink`` are at their cap (pages first)."""
        if self.group_of is None:
            return False
        cap = self.anonymous_cap if group.startswith("anonymous") else self.group_cap
        return self._held_by(sink, group) >= cap

    def _held_by(self, sink: str, group: str) -> int:
        """Rows of ``group`` pending or staged for ``sink``, less those being written dead."""
        leaving = sum(1 for where in self._evicting.values() if where == (sink, group))
        return self.outbox.index.pending_in(sink, group) + self._staged_groups.get((sink, group), 0) - leaving

    def _room(self, sink: str, group: str, pending: int, now: float) -> bool:
        """Room in ``sink``'s queue for a row of ``group``: under ``queue_size``, or made
        by writing dead the newest row of the largest group, when that is not ``group``
        and holds more than one row more (longest queue drop)."""
        leaving = sum(1 for s, _ in self._evicting.values() if s == sink)
        if pending + self._staged_rows[sink] - leaving < self.sinks[sink].queue_size:
            return True
        if self.group_of is None:
            return False
        big, _ = self.outbox.index.largest(sink)
        if big is None or big == group or self._held_by(sink, big) <= self._held_by(sink, group) + 1:
            return False
        victim = self.outbox.index.newest(sink, big, skip=self._evicting.keys())
        if victim is None:
            return False
        self._evicting[victim.id] = (sink, big)
        task = asyncio.ensure_future(self._evict(victim, now))
        self._writes.add(task)
        task.add_done_callback(self._written)
        return True

    async def _evict(self, row: Row, now: float) -> None:
        """Write ``row`` dead (``queue full``) to make room for a smaller group's row."""
        try:
            if self.outbox.index.get(row.id) is None:  # sent (or gone) meanwhile: room anyway
                return
            await self.outbox.record_many([Outcome(row.id, "dead", row.attempts, now, QUEUE_FULL)], now)
            self.counters.add(row.sink, "dropped")
            _log.error("alert_dropped", sink=row.sink, reason="sink queue full: the newest alert of the "
                       "client with the most pending made room for another client's", run=row.alert.run,
                       kind=row.alert.kind)
        except Exception:  # a task boundary: counted, logged; the row stays pending
            self.counters.errors += 1
            _log.exception("alert_evict_failed", sink=row.sink, run=row.alert.run, kind=row.alert.kind)
        finally:
            self._evicting.pop(row.id, None)

    def submit_nowait(self, alert: Alert) -> bool:
        """Route and commit on its own; False (ERROR, counted) if the intake is full."""
        routed = self.route(alert)
        if routed.counted:
            task = self._commit(routed)
            self._writes.add(task)
            task.add_done_callback(self._written)
        return routed.counted

    async def submit(self, alert: Alert) -> list[Row]:
        """Route and commit now; returns the outbox rows (committed before any sink sees them)."""
        routed = self.route(alert)
        if not routed.counted:
            return []
        try:
            return await self._commit(routed)
        except Exception:  # held and counted by ``committed``
            return []

    def _written(self, task: asyncio.Future) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()  # seen: a failed write is held and counted by ``committed``

    def _commit(self, routed: Routed) -> asyncio.Task:
        """The write in a transaction of its own (started now); ``committed`` runs before
        its rows are returned."""
        written = self.outbox.commit(routed.staged)

        async def settle() -> list[Row]:
            try:
                rows = (await written)[0]
            except BaseException as exc:
                self.committed(routed, [], exc)
                raise
            self.committed(routed, rows, None)
            return rows

        return asyncio.ensure_future(settle())

    def committed(self, routed: Routed, rows: list[Row], error: BaseException | None) -> None:
        """On the loop, once the alert's transaction committed (``rows``: its outbox rows,
        ``routed.staged.rows``) or failed: its intake place is freed, a failed page is
        held (``_hold``), the rows' sinks are woken."""
        if not routed.counted:
            return
        self._staged -= 1
        plan = routed.plan
        group = self._group(plan.alert)
        for sink in plan.due:
            self._staged_rows[sink] -= 1
            left = self._staged_groups.pop((sink, group), 1) - 1
            if left > 0:
                self._staged_groups[(sink, group)] = left
        if error is not None:
            self._hold(plan, error)
        self._woken(rows, routed.full, routed.now)

    # ---- a page survives a full disk ------------------------------------------------
    def _hold(self, plan: Plan, error: BaseException) -> None:
        """An alert whose outbox write failed (a full disk, a failing store) waits here, in
        memory, and its write is tried again (``_retry_held``) until it commits; then its
        sinks get it. At most ``hold_size`` wait; one more is lost (ERROR, counted)."""
        alert = plan.alert
        why = f"{type(error).__name__}: {error}"[:300]
        if len(self.held) >= self.hold_size:
            self.counters.lost += 1
            _log.error("alert_lost", reason="outbox write failed and the hold is full", run=alert.run,
                       kind=alert.kind, status=alert.status, held=len(self.held), error=why)
            return
        self.held.append(plan)
        _log.error("alert_held", reason="outbox write failed; kept in memory, retried", run=alert.run,
                   kind=alert.kind, status=alert.status, held=len(self.held), error=why)
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(self._retry_s, self._retry_held)

    def _retry_held(self) -> None:
        """Write every held alert again, in one transaction; on failure, back off (x2, <= 30 s)."""
        plans, self._retry = list(self.held), None
        if not plans:
            return
        now = self.clock()

        def done(f: asyncio.Future) -> None:
            error = asyncio.CancelledError() if f.cancelled() else f.exception()
            if error is not None:
                self._retry_s = min(self._retry_s * 2, HELD_RETRY_MAX_S)
                if self._retry is None:
                    self._retry = asyncio.get_running_loop().call_later(self._retry_s, self._retry_held)
                _log.warning("alerts_still_held", held=len(self.held), retry_in_s=self._retry_s,
                             error=f"{type(error).__name__}: {error}"[:300])
                return
            for plan in plans:
                self.held.remove(plan)
            self._retry_s = HELD_RETRY_S
            self.counters.recovered += len(plans)
            _log.warning("alerts_recovered", n=len(plans), held=len(self.held))
            self._woken([r for rows in f.result() for r in rows], frozenset(), now)
            if self.held and self._retry is None:
                self._retry = asyncio.get_running_loop().call_soon(self._retry_held)

        self.outbox.commit(self.outbox.stage(plans, now)).add_done_callback(done)

    def _woken(self, rows: list[Row], full: frozenset[str], now: float) -> None:
        """Committed rows: count the ones written dead for a full queue, wake the sinks."""
        for row in rows:
            if row.sink in full and row.state == "dead" and row.last_error == QUEUE_FULL and row.created_at == now:
                self.counters.add(row.sink, "dropped")
                _log.error("alert_dropped", sink=row.sink, reason="sink queue full", run=row.alert.run,
                           kind=row.alert.kind)
            elif row.state == "pending":
                self.workers[row.sink].wake()

    async def redeliver(self, sink: str | None = None, ids: Sequence[int] | None = None) -> int:
        """Dead rows (all, or ``ids``) back to pending (``wtwind alerts redeliver``); returns how many."""
        n = await self.outbox.redeliver(sink, ids, now=self.clock())
        for w in self.workers.values():
            w.wake()
        return n

    async def drain(self, timeout_s: float) -> bool:
        """Until no alert waits for its commit and no sink has a row due now; False on timeout."""
        deadline = self.clock() + timeout_s
        while self.clock() < deadline:
            now = self.clock()
            busy = self._staged > 0
            for name, worker in self.workers.items():
                nxt = await self.outbox.next_due(name)
                busy = busy or (nxt is not None and nxt <= now and worker._not_before <= now + 0.5)
            if not busy:
                return True
            await asyncio.sleep(0.02)
        return False

    async def healthcheck(self) -> dict[str, bool]:
        return {name: (w.disabled is None and await w.sink.healthcheck()) for name, w in self.workers.items()}

    async def aclose(self) -> None:
        """Stop the workers (rows still pending stay in the outbox), close sinks."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for sink in self.sinks.values():
            await sink.aclose()
