"""The alert outbox: every alert is committed here before any sink sees it.

One *row* per (alert transition, sink). A row is ``pending`` until its sink delivers
it (``delivered``) or the retry policy gives up (``dead``). Dead rows are listed and
replayed (``wtwind alerts replay``): replay puts them back to ``pending`` with zero
attempts. ``put`` is idempotent per (sink, idempotency key): offering the same
transition twice (say, after a restart) adds no row.

The interface is small on purpose so a durable implementation (SQLite, in
``wtwin.daemon.store``) can stand in for ``MemoryOutbox``; the conformance tests in
``tests/test_sinks_outbox.py`` run against every implementation. Methods are
coroutines so an implementation may fsync in a thread; ``counts()`` is synchronous
and cheap (it is read at scrape time), so keep counters in memory.

Contract, per method:

- ``put_many(items, now)``: for each ``(alert, sinks)`` item, one pending row per
  sink, due at ``now``; the whole batch is committed (durable) in one transaction
  before it returns; returns one list of rows per item (existing ones for a repeated
  idempotency key). ``put(alert, sinks, now)`` is the one-item case.
- ``due(sink, now, limit)``: pending rows of ``sink`` with ``next_attempt_at <= now``,
  in row-id order (FIFO per sink), at most ``limit``.
- ``next_due(sink)``: the smallest ``next_attempt_at`` among its pending rows, or None.
- ``record_many(outcomes, now)``: the outcomes of attempts (or of drops), one
  ``Outcome`` per row: the new state and bookkeeping, in one transaction.
  ``record(row_id, state=, attempts=, next_attempt_at=, error=, now=)`` is the
  one-row case. An outcome needs no fsync of its own: losing it (power cut) means
  at most a repeated attempt, which at-least-once delivery allows.
- ``dead(sink=None, limit=)``: dead rows, oldest first.
- ``replay(sink=None, ids=None, now=)``: dead -> pending (attempts 0, due now);
  returns how many.
- ``counts()``: ``{(sink, state): n}`` for states ``pending`` and ``dead``.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from typing import Iterable, Protocol, Sequence

from wtwin.detect.alert import Alert

STATES = ("pending", "delivered", "dead")


@dataclass(frozen=True, kw_only=True)
class Row:
    """One alert for one sink, with its delivery bookkeeping."""

    id: int
    sink: str
    alert: Alert
    state: str = "pending"
    attempts: int = 0
    next_attempt_at: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    last_error: str = ""

    @property
    def idempotency_key(self) -> str:
        return self.alert.idempotency_key


@dataclass(frozen=True)
class Outcome:
    """What became of one row: its new state, attempts, next attempt time and error."""

    row_id: int
    state: str
    attempts: int
    next_attempt_at: float
    error: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state must be one of {STATES}, got {self.state!r}")


Item = tuple[Alert, Sequence[str]]


class Outbox(Protocol):
    async def put_many(self, items: Sequence[Item], now: float) -> list[list[Row]]: ...

    async def put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]: ...

    async def due(self, sink: str, now: float, limit: int) -> list[Row]: ...

    async def next_due(self, sink: str) -> float | None: ...

    async def record_many(self, outcomes: Sequence[Outcome], now: float) -> None: ...

    async def record(
        self, row_id: int, *, state: str, attempts: int, next_attempt_at: float, error: str, now: float
    ) -> None: ...

    async def dead(self, sink: str | None = None, limit: int = 1000) -> list[Row]: ...

    async def replay(self, sink: str | None = None, ids: Iterable[int] | None = None, *, now: float) -> int: ...

    def counts(self) -> dict[tuple[str, str], int]: ...

    async def aclose(self) -> None: ...


class MemoryOutbox:
    """In-process outbox: same contract, not durable (a restart forgets it).

    Memory is bounded: delivered rows are kept only for the last ``keep_delivered``;
    dead rows beyond ``max_dead`` drop the oldest. Pending rows are bounded by the
    delivery layer (each sink's ``queue_size``).
    """

    def __init__(self, *, keep_delivered: int = 1000, max_dead: int = 100_000) -> None:
        self._ids = itertools.count(1)
        self._rows: dict[str, dict[str, OrderedDict[int, Row]]] = {s: {} for s in ("pending", "dead")}
        self._delivered: deque[Row] = deque(maxlen=keep_delivered)
        self._by_key: dict[tuple[str, str], Row] = {}
        self._where: dict[int, tuple[str, str]] = {}  # row id -> (state, sink) for pending/dead
        self._dead_n: dict[str, int] = {}
        self._max_dead = max_dead

    def _bucket(self, state: str, sink: str) -> OrderedDict[int, Row]:
        return self._rows[state].setdefault(sink, OrderedDict())

    async def put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]:
        return (await self.put_many([(alert, sinks)], now))[0]

    async def put_many(self, items: Sequence[Item], now: float) -> list[list[Row]]:
        return [self._put(alert, sinks, now) for alert, sinks in items]

    def _put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]:
        rows = []
        for sink in dict.fromkeys(sinks):
            key = (sink, alert.idempotency_key)
            if key in self._by_key:
                rows.append(self._by_key[key])
                continue
            row = Row(id=next(self._ids), sink=sink, alert=alert, next_attempt_at=now, created_at=now, updated_at=now)
            self._bucket("pending", sink)[row.id] = row
            self._where[row.id] = ("pending", sink)
            self._by_key[key] = row
            rows.append(row)
        return rows

    async def due(self, sink: str, now: float, limit: int) -> list[Row]:
        out = []
        for row in self._rows["pending"].get(sink, {}).values():
            if row.next_attempt_at <= now:
                out.append(row)
                if len(out) >= limit:
                    break
        return out

    async def next_due(self, sink: str) -> float | None:
        pending = self._rows["pending"].get(sink)
        return min((r.next_attempt_at for r in pending.values()), default=None) if pending else None

    async def record(
        self, row_id: int, *, state: str, attempts: int, next_attempt_at: float, error: str, now: float
    ) -> None:
        await self.record_many([Outcome(row_id, state, attempts, next_attempt_at, error)], now)

    async def record_many(self, outcomes: Sequence[Outcome], now: float) -> None:
        for missing in (o.row_id for o in outcomes if o.row_id not in self._where):
            raise KeyError(missing)  # before any change: all or nothing, as in one transaction
        for o in outcomes:
            self._record(o, now)

    def _record(self, o: Outcome, now: float) -> None:
        row_id, state = o.row_id, o.state
        old_state, sink = self._where[row_id]
        row = replace(self._rows[old_state][sink][row_id], state=state, attempts=o.attempts,
                      next_attempt_at=o.next_attempt_at, last_error=o.error, updated_at=now)
        self._by_key[(sink, row.idempotency_key)] = row
        if state == old_state:  # in place: keeps the FIFO position
            self._rows[state][sink][row_id] = row
            return
        del self._rows[old_state][sink][row_id]
        self._count(old_state, sink, -1)
        self._enter(row)

    def _count(self, state: str, sink: str, delta: int) -> None:
        if state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) + delta

    def _enter(self, row: Row) -> None:
        if row.state == "delivered":
            self._where.pop(row.id)
            if len(self._delivered) == self._delivered.maxlen:
                gone = self._delivered[0]
                if self._by_key.get((gone.sink, gone.idempotency_key)) is gone:
                    del self._by_key[(gone.sink, gone.idempotency_key)]
            self._delivered.append(row)
            return
        bucket = self._bucket(row.state, row.sink)
        out_of_order = bool(bucket) and row.id < next(reversed(bucket))
        bucket[row.id] = row
        self._where[row.id] = (row.state, row.sink)
        self._count(row.state, row.sink, +1)
        if out_of_order:  # a replayed row goes back to its FIFO place
            self._rows[row.state][row.sink] = OrderedDict(sorted(bucket.items()))
        if row.state == "dead" and sum(self._dead_n.values()) > self._max_dead:
            self._drop_oldest_dead()

    def _drop_oldest_dead(self) -> None:
        oldest = min((b for b in self._rows["dead"].values() if b), key=lambda b: next(iter(b)))
        row_id, row = oldest.popitem(last=False)
        self._where.pop(row_id)
        self._count("dead", row.sink, -1)

    async def dead(self, sink: str | None = None, limit: int = 1000) -> list[Row]:
        buckets = [self._rows["dead"].get(sink, {})] if sink else list(self._rows["dead"].values())
        return sorted((r for b in buckets for r in b.values()), key=lambda r: r.id)[:limit]

    async def replay(self, sink: str | None = None, ids: Iterable[int] | None = None, *, now: float) -> int:
        wanted = set(ids) if ids is not None else None
        chosen = [r.id for r in await self.dead(sink, limit=self._max_dead) if wanted is None or r.id in wanted]
        await self.record_many([Outcome(row_id, "pending", 0, now) for row_id in chosen], now)
        return len(chosen)

    def counts(self) -> dict[tuple[str, str], int]:
        out = {(sink, "pending"): len(rows) for sink, rows in self._rows["pending"].items()}
        out.update({(sink, "dead"): n for sink, n in self._dead_n.items()})
        return out

    async def aclose(self) -> None:
        return None
