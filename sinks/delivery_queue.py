"""The sinks' delivery queue (the alert outbox): its contract and its in-memory pending view.

One *row* per (alert transition, sink). A row is ``pending`` until its sink delivers
it (``delivered``) or the retry policy gives up (``dead``). Dead rows are listed and
redelivered (``wtwind alerts redeliver``): that puts them back to ``pending`` with zero
attempts. Writing is idempotent per (sink, idempotency key): offering the same
transition twice (say, after a restart) adds no row. A row may be due later than
its creation: a route's ``for_s`` hold (``sinks.routing``) is a row due at the end of
the hold, cancelled (deleted) if the episode resolves first.

This module is the one home of the contract; implementations import it, never the
other way: ``MemoryOutbox`` (``sinks/memory_outbox.py``) and the durable ``SqliteOutbox``
(``wtwin.daemon.store.deliveries``). The conformance tests in
``tests/test_sinks_delivery_queue.py`` run against both. Reads of what is due and ``counts()`` are answered from memory
(``PendingIndex``), so neither costs I/O.

Contract, per method:

- ``stage(plans, now, full=)``: a ``Staged`` write of routed alerts
  (``routing.Plan``) in two plain steps: ``op(conn)`` runs inside a transaction the
  caller commits (in the daemon, the alert journal's: ``daemon/alert_path.py``), then
  ``rows(result)``, on the loop once it committed, mirrors the rows (due, counted) and
  returns them per plan. ``op`` also writes the alert itself, once, even when no sink
  gets it. New rows for a sink in ``full`` (its queue is full) are written ``dead``
  with the error ``queue full`` (redeliverable).
- ``commit(staged)``: a staged write in a transaction of its own; a future of its rows.
- ``put_many(items, now)``: for each ``(alert, sinks)`` item, one pending row per
  sink, due at ``now``, committed (durable) in one transaction before it returns; one
  list of rows per item (existing ones for a repeated idempotency key).
  ``put(alert, sinks, now)`` is the one-item case.
- ``due(sink, now, limit)``: pending rows of ``sink`` with ``next_attempt_at <= now``,
  at most ``limit``: in row-id order (FIFO) within a group, the groups in turn
  (``PendingIndex``: a group is the principal of the alert's run in the daemon; one
  group, plain FIFO, elsewhere).
- ``next_due(sink)``: the smallest ``next_attempt_at`` among its pending rows, or None.
- ``record_many(outcomes, now)``: the outcomes of attempts (or of drops), one
  ``Outcome`` per row: the new state and bookkeeping, in one transaction.
  ``record(row_id, state=, attempts=, next_attempt_at=, error=, now=)`` is the
  one-row case. An outcome needs no fsync of its own: losing it (power cut) means
  at most a repeated attempt, which at-least-once delivery allows.
- ``dead(sink=None, limit=)``: dead rows, oldest first.
- ``redeliver(sink=None, ids=None, now=)``: dead -> pending (attempts 0, due now);
  returns how many.
- ``counts()``: ``{(sink, state): n}`` for states ``pending`` and ``dead``.
- ``index``: the ``PendingIndex`` itself (delivery reads per-group counts from it and
  sets its ``group_of``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

from wtwin.detect.alert import Alert
from .routing import Facts, Plan, settle

STATES = ("pending", "delivered", "dead")
_MAX_SERVED = 4096  # groups with nothing pending whose last turn is still remembered


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


class PendingIndex:
    """Pending rows per sink and group in FIFO (row id) order, and dead counts per sink.

    Workers ask ``due``/``next_due`` on every step and the metrics collector reads
    ``counts`` at scrape time: pending rows are mirrored here, dead rows only counted.
    Pages first: within a sink, rows are grouped by ``group_of(alert)`` (in the daemon,
    the client that created the alert's run: its CURVE key, else its connection), FIFO
    within a group, and ``due`` takes the groups in turn, the one served longest ago
    first (a group not served lately, before those just served): one client's flood
    waits behind itself, not in front of another's page, however many groups it keeps
    busy. A row keeps the group it entered with."""

    def __init__(self, group_of: Callable[[object], str] | None = None) -> None:
        self.group_of = group_of or (lambda alert: "")
        self._pending: dict[str, dict[str, OrderedDict[int, Row]]] = {}  # sink -> group -> rows
        self._where: dict[int, tuple[str, str]] = {}  # row id -> (sink, group)
        self._served: dict[str, dict[str, int]] = {}  # sink -> group -> tick of its last turn
        self._tick = 0
        self._dead_n: dict[str, int] = {}

    def get(self, row_id: int) -> Row | None:
        where = self._where.get(row_id)
        return None if where is None else self._pending[where[0]][where[1]][row_id]

    def moved(self, old_state: str | None, row: Row) -> None:
        """Mirror one row's new state (``old_state`` None: a new row); FIFO order kept."""
        sink = row.sink
        if old_state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) - 1
        if row.state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) + 1
        if row.state != "pending":
            self.drop(row.id)
            return
        where = self._where.get(row.id) or (sink, self.group_of(row.alert))
        bucket = self._pending.setdefault(sink, {}).setdefault(where[1], OrderedDict())
        out_of_order = row.id not in bucket and bool(bucket) and row.id < next(reversed(bucket))
        bucket[row.id] = row
        self._where[row.id] = where
        if out_of_order:  # a redelivered row goes back to its FIFO place
            self._pending[sink][where[1]] = OrderedDict(sorted(bucket.items()))

    def drop(self, row_id: int) -> None:
        """A pending row gone (sent, dead or cancelled)."""
        where = self._where.pop(row_id, None)
        if where is not None:
            groups = self._pending[where[0]]
            del groups[where[1]][row_id]
            if not groups[where[1]]:
                del groups[where[1]]

    def forget_dead(self, sink: str, n: int = 1) -> None:
        self._dead_n[sink] = self._dead_n.get(sink, 0) - n

    def dead_counted(self, sink: str, n: int) -> None:
        """``n`` dead rows of ``sink`` not mirrored one by one (read at startup)."""
        self._dead_n[sink] = self._dead_n.get(sink, 0) + n

    def pending_in(self, sink: str, group: str) -> int:
        """Rows of ``group`` pending for ``sink`` (its cap is the delivery's)."""
        return len(self._pending.get(sink, {}).get(group, ()))

    def due(self, sink: str, now: float, limit: int) -> list[Row]:
        """Up to ``limit`` due rows, one group at a time in turn (least recently served
        first), FIFO within each."""
        pending = self._pending.get(sink)
        if not pending:
            return []
        served = self._served.setdefault(sink, {})
        order = sorted(pending, key=lambda g: served.get(g, -1))  # stable: arrival order on ties
        iters = [(g, (r for r in pending[g].values() if r.next_attempt_at <= now)) for g in order]
        out: list[Row] = []
        while iters and len(out) < limit:
            alive = []
            for group, it in iters:
                row = next(it, None)
                if row is not None:
                    out.append(row)
                    alive.append((group, it))
                    self._tick += 1
                    served[group] = self._tick
                    if len(out) >= limit:
                        break
            iters = alive
        if len(served) > 2 * len(pending) + _MAX_SERVED:  # bounded: groups with nothing pending go
            self._served[sink] = {g: t for g, t in served.items() if g in pending}
        return out

    def largest(self, sink: str) -> tuple[str | None, int]:
        """The group with the most pending rows for ``sink``, and how many."""
        groups = self._pending.get(sink) or {}
        group = max(groups, key=lambda g: len(groups[g]), default=None)
        return group, (len(groups[group]) if group is not None else 0)

    def newest(self, sink: str, group: str, skip=frozenset()) -> Row | None:
        """The group's newest pending row not in ``skip`` (the first to go when a sink is full)."""
        for row in reversed((self._pending.get(sink) or {}).get(group, {}).values()):
            if row.id not in skip:
                return row
        return None

    def next_due(self, sink: str) -> float | None:
        groups = self._pending.get(sink)
        return min((r.next_attempt_at for g in groups.values() for r in g.values()), default=None) if groups else None

    def counts(self) -> dict[tuple[str, str], int]:
        out = {}
        for sink, groups in self._pending.items():
            n = sum(len(g) for g in groups.values())
            if n:
                out[(sink, "pending")] = n
        out.update({(sink, "dead"): n for sink, n in self._dead_n.items() if n})
        return out


Item = tuple[Alert, Sequence[str]]
QUEUE_FULL = "queue full"  # the error of a row written dead: its sink's queue_size was reached


@dataclass(frozen=True)
class Staged:
    """A write of routed alerts: ``op(conn)`` inside a transaction (``conn`` is None for
    the memory outbox), then ``rows(result)`` on the loop once it committed: the rows
    per plan, now due and counted."""

    op: Callable[[Any], Any]
    rows: Callable[[Any], list[list[Row]]]


def plans_for(items: Sequence[Item], now: float) -> list[Plan]:
    """``put_many``'s items as plans: every sink, due now, no pairing."""
    return [Plan(alert, dict.fromkeys(sinks, now)) for alert, sinks in items]


class Outbox(Protocol):
    index: PendingIndex

    def stage(self, plans: Sequence[Plan], now: float, *, full: frozenset[str] = frozenset()) -> Staged: ...

    def commit(self, staged: Staged) -> asyncio.Future: ...

    async def put_many(self, items: Sequence[Item], now: float) -> list[list[Row]]: ...

    async def put(self, alert: Alert, sinks: Sequence[str], now: float) -> list[Row]: ...

    async def due(self, sink: str, now: float, limit: int) -> list[Row]: ...

    async def next_due(self, sink: str) -> float | None: ...

    async def record_many(self, outcomes: Sequence[Outcome], now: float) -> None: ...

    async def record(
        self, row_id: int, *, state: str, attempts: int, next_attempt_at: float, error: str, now: float
    ) -> None: ...

    async def dead(self, sink: str | None = None, limit: int = 1000) -> list[Row]: ...

    async def redeliver(self, sink: str | None = None, ids: Iterable[int] | None = None, *, now: float) -> int: ...

    def counts(self) -> dict[tuple[str, str], int]: ...

    async def aclose(self) -> None: ...

