"""``MemoryOutbox``: the delivery queue's contract (`delivery_queue`) in process, not
durable: what the daemon uses without a store, and what the conformance tests hold the
durable ``SqliteOutbox`` to."""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, deque
from dataclasses import replace
from typing import Iterable, Sequence

from wtwin.detect.alert import Alert

from .delivery_queue import QUEUE_FULL, Item, Outcome, PendingIndex, Row, Staged, plans_for
from .routing import Facts, Plan, settle


class MemoryOutbox:
    """In-process outbox: same contract, not durable (a restart forgets it).

    Memory is bounded: delivered rows are kept only for the last ``keep_delivered``;
    dead rows beyond ``max_dead`` drop the oldest. Pending rows are bounded by the
    delivery layer (each sink's ``queue_size``); what pairing a resolve needs of its
    firings (``_fired``), by the episodes still open.
    """

    def __init__(self, *, keep_delivered: int = 1000, max_dead: int = 100_000) -> None:
        self._ids = itertools.count(1)
        self.index = PendingIndex()
        self._dead: dict[str, OrderedDict[int, Row]] = {}
        self._delivered: deque[Row] = deque(maxlen=keep_delivered)
        self._by_key: dict[tuple[str, str], Row] = {}
        self._fired: dict[tuple[str, str], int] = {}  # (sink, firing key) -> row id, open episodes
        self._max_dead = max_dead

    def _row(self, row_id: int) -> Row | None:
        row = self.index.get(row_id)
        if row is not None:
            return row
        for bucket in self._dead.values():
            if row_id in bucket:
                return bucket[row_id]
        return None

    # ---- writing routed alerts -------------------------------------------------------------
    def stage(self, plans: Sequence[Plan], now: float, *, full: frozenset[str] = frozenset()) -> Staged:
        """Applied when ``op`` runs (there is no transaction to wait for)."""
        return Staged(lambda _conn: [self._apply(plan, now, full) for plan in plans], lambda rows: rows)

    def commit(self, staged: Staged) -> asyncio.Future:
        """Applied now; a future already done (an error in it, as a failed transaction's)."""
        fut = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(staged.rows(staged.op(None)))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def _apply(self, plan: Plan, now: float, full: frozenset[str] = frozenset()) -> list[Row]:
        found: dict[str, list[Facts]] = {}
        for sink in plan.due:
            for key in plan.episode:
                row_id = self._fired.get((sink, key))
                if row_id is not None:
                    row = self._row(row_id)
                    found.setdefault(sink, []).append(
                        (row_id, "delivered", 1, 0.0) if row is None
                        else (row_id, row.state, row.attempts, row.next_attempt_at))
        cancel, due = settle(plan, found, now)
        for row_id in cancel:
            self.index.drop(row_id)
        if plan.paired:  # the episode is over: nothing more to pair
            for sink in plan.due:
                for key in plan.episode:
                    self._fired.pop((sink, key), None)
        return [self._put(plan.alert, sink, at, now, sink in full) for sink, at in due.items()]

    def _put(self, alert: Alert, sink: str, at: float, now: float, dead: bool) -> Row:
        key = (sink, alert.idempotency_key)
        if key in self._by_key:
            return self._by_key[key]
        row = Row(id=next(self._ids), sink=sink, alert=alert, next_attempt_at=at, created_at=now, updated_at=now,
                  state="dead" if dead else "pending", last_error=QUEUE_FULL if dead else "")
        self.index.moved(None, row)
        if dead:
            self._enter_dead(row)
        self._by_key[key] = row
        if alert.status == "firing":
            self._fired[key] = row.id
        return row

    async def put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]:
        return (await self.put_many([(alert, sinks)], now))[0]

    async def put_many(self, items: Sequence[Item], now: float) -> list[list[Row]]:
        return [self._apply(plan, now) for plan in plans_for(items, now)]

    # ---- reading and outcomes ----------------------------------------------------------------
    async def due(self, sink: str, now: float, limit: int) -> list[Row]:
        return self.index.due(sink, now, limit)

    async def next_due(self, sink: str) -> float | None:
        return self.index.next_due(sink)

    async def record(
        self, row_id: int, *, state: str, attempts: int, next_attempt_at: float, error: str, now: float
    ) -> None:
        await self.record_many([Outcome(row_id, state, attempts, next_attempt_at, error)], now)

    async def record_many(self, outcomes: Sequence[Outcome], now: float) -> None:
        for missing in (o.row_id for o in outcomes if self._row(o.row_id) is None):
            raise KeyError(missing)  # before any change: all or nothing, as in one transaction
        for o in outcomes:
            self._record(o, now)

    def _record(self, o: Outcome, now: float) -> None:
        old = self._row(o.row_id)
        row = replace(old, state=o.state, attempts=o.attempts, next_attempt_at=o.next_attempt_at,
                      last_error=o.error, updated_at=now)
        self._by_key[(row.sink, row.idempotency_key)] = row
        self.index.moved(old.state, row)
        if old.state == "dead":
            del self._dead[row.sink][row.id]
        if row.state == "dead":
            self._enter_dead(row)
        elif row.state == "delivered":
            self._keep_delivered(row)

    def _keep_delivered(self, row: Row) -> None:
        if len(self._delivered) == self._delivered.maxlen:
            gone = self._delivered[0]
            if self._by_key.get((gone.sink, gone.idempotency_key)) is gone:
                del self._by_key[(gone.sink, gone.idempotency_key)]
        self._delivered.append(row)

    def _enter_dead(self, row: Row) -> None:
        bucket = self._dead.setdefault(row.sink, OrderedDict())
        bucket[row.id] = row
        if next(reversed(bucket)) != row.id:  # a row older than the last dead one: keep id order
            self._dead[row.sink] = OrderedDict(sorted(bucket.items()))
        if sum(len(b) for b in self._dead.values()) > self._max_dead:
            oldest = min((b for b in self._dead.values() if b), key=lambda b: next(iter(b)))
            _, gone = oldest.popitem(last=False)
            self.index.forget_dead(gone.sink)

    async def dead(self, sink: str | None = None, limit: int = 1000) -> list[Row]:
        buckets = [self._dead.get(sink, {})] if sink else list(self._dead.values())
        return sorted((r for b in buckets for r in b.values()), key=lambda r: r.id)[:limit]

    async def redeliver(self, sink: str | None = None, ids: Iterable[int] | None = None, *, now: float) -> int:
        wanted = set(ids) if ids is not None else None
        chosen = [r.id for r in await self.dead(sink, limit=self._max_dead) if wanted is None or r.id in wanted]
        await self.record_many([Outcome(row_id, "pending", 0, now) for row_id in chosen], now)
        return len(chosen)

    def counts(self) -> dict[tuple[str, str], int]:
        return self.index.counts()

    async def aclose(self) -> None:
        return None
