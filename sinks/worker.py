"""`Worker`: one sink's sender, its own task reading its own rows from the outbox.

A worker honours its sink's rate limit (``min_interval_s``); whatever becomes due
meanwhile goes out as one message of up to ``max_batch`` alerts (Slack's burst
coalescing). On failure it asks ``RetryPolicy.decide`` (the one retry decision) and
backs the whole sink off (the endpoint is what failed), recording attempts and the
next attempt time on each row (one ``record_many`` per attempt); a row whose attempts
are exhausted is dead. A failed attempt costs the event loop one connection attempt
and one outbox write, whatever the batch size; waiting out a backoff or a timeout
costs it nothing. A sink that says it is gone (``disable``) is disabled with an ERROR;
its rows are dead-lettered. Outcomes are counted per (sink, outcome), outcome in
``OUTCOMES``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Callable, Sequence

import structlog

from .base import Sink
from .delivery_queue import Outbox, Outcome, Row
from .retry import RetryPolicy

OUTCOMES = ("success", "retry", "dead", "dropped", "disabled")
_log = structlog.get_logger("wtwin.sinks.delivery")


class Counters:
    """``{(sink, outcome): n}``, read by the metrics collector at scrape time."""

    def __init__(self, sinks: Sequence[str]) -> None:
        self.values = {(s, o): 0 for s in sinks for o in OUTCOMES}
        self.intake_dropped = 0
        self.lost = 0    # alerts whose transaction failed with the hold full (``Delivery._hold``)
        self.recovered = 0  # held alerts written once the store could again
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
        """One decision and one delay for the batch; the sink backs off as a whole.

        The backoff step is the sink's consecutive failures (or the oldest row's attempts,
        if more), so fresh alerts do not make a dead endpoint be hammered; the youngest
        row's attempts decide retry or dead, and a row whose own attempts are exhausted
        is dead.
        """
        now = self.clock()
        self._failures += 1
        step = max(self._failures, max(r.attempts for r in rows) + 1)
        decision = self.policy.decide(min(r.attempts for r in rows) + 1, exc, self.rng, step=step)
        reason = decision.reason
        if decision.action == "disable":
            self.disabled = reason
            _log.error("sink_disabled", sink=self.sink.name, reason=reason,
                       hint="alerts for this sink are dead-lettered; fix its config, restart, redeliver")
            await self._finish(rows, "dead", "disabled", f"sink disabled: {reason}", now, attempts=1)
            return
        retry = decision.action == "retry"
        if retry:
            self._not_before = max(self._not_before, now + decision.delay)
        outcomes = []
        for row in rows:
            if retry and not self.policy.exhausted(row.attempts + 1):
                outcomes.append(Outcome(row.id, "pending", row.attempts + 1, now + decision.delay, reason))
            else:
                outcomes.append(Outcome(row.id, "dead", row.attempts + 1, now, reason))
        await self.outbox.record_many(outcomes, now)
        dead = sum(o.state == "dead" for o in outcomes)
        self.counters.add(self.sink.name, "retry", len(rows) - dead)
        self.counters.add(self.sink.name, "dead", dead)
        (_log.error if dead else _log.warning)(
            "delivery_failed", sink=self.sink.name, n=len(rows), error=reason, dead=dead,
            retry_in_s=round(decision.delay, 3) if retry and dead < len(rows) else None)

    async def _finish(self, rows: list[Row], state: str, outcome: str, error: str, now: float,
                      attempts: int = 0) -> None:
        extra = 1 if state == "delivered" else attempts
        await self.outbox.record_many([Outcome(r.id, state, r.attempts + extra, now, error) for r in rows], now)
        self.counters.add(self.sink.name, outcome, len(rows))
