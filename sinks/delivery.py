"""Delivery: route each alert, commit it to the outbox, then one worker per sink sends it.

The daemon calls ``submit_nowait(alert)`` on its hot path: it never blocks (a
bounded intake queue; overflow is an ERROR and a counter). A dispatcher task takes
whatever the intake holds (one *slice*, up to ``slice_size`` alerts), routes it
(``sinks.routing``), commits one outbox row per alert and sink in one transaction
(``sinks.outbox.put_many``: one fsync per slice, not per alert) and wakes those
sinks' workers. Each worker is its own task reading its own rows, so one slow or
dead sink never stalls detection or the other sinks; a sink's pending rows are its
bounded queue (``queue_size``; beyond it new rows are
dead-lettered as ``dropped``, counted and replayable).

A worker honours its sink's rate limit (``min_interval_s``); whatever becomes due
meanwhile goes out as one message of up to ``max_batch`` alerts (Slack's burst
coalescing). On failure it asks ``RetryPolicy.decide`` and backs the whole sink
off (the endpoint is what failed), recording attempts and the next attempt time
on each row (one ``record_many`` per attempt); after the last attempt a row is dead.
A failed attempt costs the event loop one connection attempt and one outbox write,
whatever the batch size; waiting out a backoff or a timeout costs it nothing. A sink
that says it is gone (``disable``) is disabled with an ERROR; its rows are
dead-lettered.

Outcomes are counted per (sink, outcome), outcome in ``OUTCOMES``.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Callable, Sequence

import structlog

from wtwin.detect.alert import Alert
from .base import Sink
from .outbox import Item, Outbox, Outcome, Row
from .retry import DISABLE, RETRY, RetryPolicy, classify, describe
from .routing import RouteConfig, Router

OUTCOMES = ("success", "retry", "dead", "dropped", "disabled")
COMMIT_RETRY_S = 0.25  # between attempts to write a slice of alerts to the outbox
_log = structlog.get_logger("wtwin.sinks.delivery")


class Counters:
    """``{(sink, outcome): n}``, read by the metrics collector at scrape time."""

    def __init__(self, sinks: Sequence[str]) -> None:
        self.values = {(s, o): 0 for s in sinks for o in OUTCOMES}
        self.intake_dropped = 0
        self.lost = 0    # alerts taken from the intake whose outbox rows could not be written
        self.errors = 0

    def add(self, sink: str, outcome: str, n: int = 1) -> None:
        self.values[(sink, outcome)] = self.values.get((sink, outcome), 0) + n


class Worker:
    """Sends one sink's due rows, one message at a time."""

    def __init__(self, sink: Sink, outbox: Outbox, policy: RetryPolicy, counters: Counters,
                 clock: Callable[[], float], rng: random.Random) -> None:
        self.sink, self.outbox, self.policy, self.counters = sink, outbox, policy, counters
        self.clock, self.rng = clock, rng
        self.disabled: str | None = None
        self._wake = asyncio.Event()
        self._not_before = 0.0
        self._failures = 0  # consecutive failed attempts of this sink

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:  # task boundary: log, count, keep the sink alive
                self.counters.errors += 1
                _log.exception("delivery_worker_error", sink=self.sink.name)
                await self._sleep(1.0)

    async def _step(self) -> None:
        self._wake.clear()
        now = self.clock()
        if now < self._not_before:
            await self._sleep(self._not_before - now)
            return
        rows = await self.outbox.due(self.sink.name, now, self.sink.max_batch)
        if not rows:
            nxt = await self.outbox.next_due(self.sink.name)
            await self._sleep(None if nxt is None else max(nxt - now, 0.0))
        elif self.disabled is not None:
            await self._finish(rows, "dead", "disabled", f"sink disabled: {self.disabled}", now)
        elif (until := self._linger_until(rows)) > now:
            await self._sleep(until - now)
        else:
            await self._attempt(rows)

    def _linger_until(self, rows: list[Row]) -> float:
        """A fresh, not yet full batch waits ``linger_s`` for the rest of its burst."""
        if not self.sink.linger_s or len(rows) >= self.sink.max_batch or rows[0].attempts:
            return 0.0
        return min(r.created_at for r in rows) + self.sink.linger_s

    async def _sleep(self, timeout: float | None) -> None:
        """Until woken (new rows) or ``timeout`` passes; never busy-waits."""
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    async def _attempt(self, rows: list[Row]) -> None:
        start = self.clock()
        self._not_before = start + self.sink.min_interval_s
        try:
            await self.sink.send([r.alert for r in rows])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # classified below; never escapes
            await self._failed(rows, exc)
            return
        now = self.clock()
        self._failures = 0
        await self._finish(rows, "delivered", "success", "", now)
        _log.info("alerts_delivered", sink=self.sink.name, n=len(rows), latency_s=round(now - start, 4))

    async def _failed(self, rows: list[Row], exc: Exception) -> None:
        """One verdict and one delay for the batch; the sink backs off as a whole.

        The delay grows with the sink's consecutive failures (not only the rows'
        attempts), so fresh alerts do not make a dead endpoint be hammered.
        """
        now = self.clock()
        self._failures += 1
        verdict, reason = classify(exc), describe(exc)
        if verdict == DISABLE:
            self.disabled = reason
            _log.error("sink_disabled", sink=self.sink.name, reason=reason,
                       hint="alerts for this sink are dead-lettered; fix its config, restart, replay")
            await self._finish(rows, "dead", "disabled", f"sink disabled: {reason}", now, attempts=1)
            return
        delay = 0.0
        if verdict == RETRY:
            n = max(self._failures, max(r.attempts for r in rows) + 1)
            delay = self.policy.delay(n, exc, self.rng)
            self._not_before = max(self._not_before, now + delay)
        outcomes = []
        for row in rows:
            if verdict == RETRY and row.attempts + 1 < self.policy.max_attempts:
                outcomes.append(Outcome(row.id, "pending", row.attempts + 1, now + delay, reason))
            else:
                outcomes.append(Outcome(row.id, "dead", row.attempts + 1, now, reason))
        await self.outbox.record_many(outcomes, now)
        dead = sum(o.state == "dead" for o in outcomes)
        self.counters.add(self.sink.name, "retry", len(rows) - dead)
        self.counters.add(self.sink.name, "dead", dead)
        (_log.error if dead else _log.warning)(
            "delivery_failed", sink=self.sink.name, n=len(rows), error=reason, dead=dead,
            retry_in_s=round(delay, 3) if verdict == RETRY and dead < len(rows) else None)

    async def _finish(self, rows: list[Row], state: str, outcome: str, error: str, now: float,
                      attempts: int = 0) -> None:
        extra = 1 if state == "delivered" else attempts
        await self.outbox.record_many([Outcome(r.id, state, r.attempts + extra, now, error) for r in rows], now)
        self.counters.add(self.sink.name, outcome, len(rows))


class Delivery:
    """Router + outbox + one worker per sink; the daemon's single entry point."""

    def __init__(self, *, sinks: Sequence[Sink], outbox: Outbox, routes: Sequence[RouteConfig] = (),
                 policy: RetryPolicy | None = None, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, intake_size: int = 10_000,
                 slice_size: int = 1000) -> None:
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
        self._intake: asyncio.Queue[Alert] = asyncio.Queue(maxsize=intake_size)
        self.slice_size = slice_size  # alerts taken from the intake per outbox transaction
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Start the dispatcher and workers; rows left pending earlier are picked up."""
        self._tasks = [asyncio.create_task(self._dispatch(), name="wtwin-delivery-dispatch")]
        self._tasks += [asyncio.create_task(w.run(), name=f"wtwin-sink-{n}") for n, w in self.workers.items()]

    def submit_nowait(self, alert: Alert) -> bool:
        """Hot path: queue an alert transition; False (ERROR, counted) if the intake is full."""
        try:
            self._intake.put_nowait(alert)
            return True
        except asyncio.QueueFull:
            self.counters.intake_dropped += 1
            _log.error("alert_dropped", reason="delivery intake full", run=alert.run, kind=alert.kind)
            return False

    async def submit(self, alert: Alert) -> list[Row]:
        """Route and commit now; returns the outbox rows (committed before any sink sees them)."""
        return await self._route([alert])

    async def _route(self, alerts: Sequence[Alert]) -> list[Row]:
        """Route a slice of transitions, plus holds that came due, and commit them together."""
        now = self.clock()
        items = [item for alert in alerts for item in self.router.offer(alert, now)]
        items += self.router.due(now)
        return await self._commit(items, now) if items else []

    async def _commit(self, items: Sequence[Item], now: float) -> list[Row]:
        """One outbox transaction for the slice; rows beyond a sink's queue_size are dropped."""
        room = {name: sink.queue_size - self.outbox.counts().get((name, "pending"), 0)
                for name, sink in self.sinks.items()}
        rows = [row for found in await self.outbox.put_many(items, now) for row in found]
        dropped, woken = [], set()
        for row in rows:
            fresh = row.state == "pending" and row.attempts == 0
            if fresh and room[row.sink] <= 0:
                dropped.append(row)
            else:
                room[row.sink] -= fresh
                woken.add(row.sink)
        if dropped:  # recorded dead before the workers are woken for this slice
            await self.outbox.record_many([Outcome(r.id, "dead", 0, now, "queue full") for r in dropped], now)
        for row in dropped:
            self.counters.add(row.sink, "dropped")
            _log.error("alert_dropped", sink=row.sink, reason="sink queue full", run=row.alert.run,
                       kind=row.alert.kind)
        for name in woken:
            self.workers[name].wake()
        return rows

    async def _dispatch(self) -> None:
        while True:
            try:
                await self._dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # task boundary: log, count, keep dispatching
                self.counters.errors += 1
                _log.exception("delivery_dispatch_error")

    async def _dispatch_once(self) -> None:
        """Wait for the intake (or a hold coming due), then take everything queued, one slice."""
        nxt = self.router.next_due()
        timeout = None if nxt is None else max(nxt - self.clock(), 0.0)
        alerts = []
        try:
            alerts.append(await asyncio.wait_for(self._intake.get(), timeout))
        except asyncio.TimeoutError:
            pass
        while alerts and len(alerts) < self.slice_size and not self._intake.empty():
            alerts.append(self._intake.get_nowait())
        now = self.clock()
        items = [item for alert in alerts for item in self.router.offer(alert, now)]
        items += self.router.due(now)
        if items:
            await self._commit_or_count(items, now)

    async def _commit_or_count(self, items: Sequence[Item], now: float) -> None:
        """An alert taken from the intake reaches the outbox or is counted as lost.

        The slice is tried twice (a busy disk), then alert by alert, so that one alert
        that cannot be written (a poisoned value) costs only itself (issue 15)."""
        for attempt in range(2):
            try:
                await self._commit(items, now)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.counters.errors += 1
                error = exc
                await asyncio.sleep(COMMIT_RETRY_S * (attempt + 1))
        if len(items) > 1:
            for item in items:
                await self._commit_or_count([item], now)
            return
        self.counters.lost += 1
        alert = items[0][0]
        _log.error("alert_lost", reason="outbox write failed", run=alert.run, kind=alert.kind,
                   status=alert.status, error=f"{type(error).__name__}: {error}"[:300])

    async def replay(self, sink: str | None = None) -> int:
        """Dead rows back to pending (``wtwind alerts replay``); returns how many."""
        n = await self.outbox.replay(sink, now=self.clock())
        for w in self.workers.values():
            w.wake()
        return n

    async def drain(self, timeout_s: float) -> bool:
        """Until the intake is empty and no sink has a row due now; False on timeout."""
        deadline = self.clock() + timeout_s
        while self.clock() < deadline:
            now = self.clock()
            busy = not self._intake.empty()
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
        """Stop dispatcher and workers (rows still pending stay in the outbox), close sinks."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for sink in self.sinks.values():
            await sink.aclose()
