"""`PendingIndex`: the outbox's in-memory view of what is due, shared by both outboxes.

Workers ask ``due``/``next_due`` on every step and the metrics collector reads
``counts`` at scrape time, so neither may cost I/O: pending rows are mirrored here per
sink, and dead rows only as a count per sink. ``MemoryOutbox`` keeps its rows here;
``SqliteOutbox`` mirrors its table's pending rows once committed.

**Pages first** (issue 24). Within a sink, pending rows are grouped by ``group_of(alert)``
(in the daemon: the principal that owns the alert's run, ``anonymous`` for runs with
none), FIFO within a group, and ``due`` takes the groups in turn (round-robin): ten
thousand alerts of one principal's flood wait behind each other, not in front of
another principal's page. A row keeps the group it entered with.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .outbox import Row


class PendingIndex:
    """Pending rows per sink and group in FIFO (row id) order, and dead counts per sink."""

    def __init__(self, group_of: Callable[[object], str] | None = None) -> None:
        self.group_of = group_of or (lambda alert: "")
        self._pending: dict[str, dict[str, OrderedDict[int, Row]]] = {}  # sink -> group -> rows
        self._where: dict[int, tuple[str, str]] = {}  # row id -> (sink, group)
        self._turn: dict[str, int] = {}               # sink -> the group served first next time
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
        if out_of_order:  # a replayed row goes back to its FIFO place
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
        """Up to ``limit`` due rows, one group at a time in turn, FIFO within each."""
        groups = list(self._pending.get(sink, {}).values())
        if not groups:
            return []
        start = self._turn.get(sink, 0) % len(groups)
        self._turn[sink] = start + 1
        order = groups[start:] + groups[:start]
        iters = [(r for r in g.values() if r.next_attempt_at <= now) for g in order]
        out: list[Row] = []
        while iters and len(out) < limit:
            alive = []
            for it in iters:
                row = next(it, None)
                if row is not None:
                    out.append(row)
                    alive.append(it)
                    if len(out) >= limit:
                        break
            iters = alive
        return out

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
