"""`PendingIndex`: the outbox's in-memory view of what is due, shared by both outboxes.

Workers ask ``due``/``next_due`` on every step and the metrics collector reads
``counts`` at scrape time, so neither may cost I/O: pending rows are mirrored here per
sink in row-id (FIFO) order, and dead rows only as a count per sink. ``MemoryOutbox``
keeps its rows here; ``SqliteOutbox`` mirrors its table's pending rows once committed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .outbox import Row


class PendingIndex:
    """Pending rows per sink in FIFO (row id) order, and dead counts per sink.

    What ``due``/``next_due``/``counts`` read, in memory, for both outboxes (pending rows
    are bounded by each sink's ``queue_size``)."""

    def __init__(self) -> None:
        self._pending: dict[str, OrderedDict[int, Row]] = {}
        self._sink_of: dict[int, str] = {}
        self._dead_n: dict[str, int] = {}

    def get(self, row_id: int) -> Row | None:
        sink = self._sink_of.get(row_id)
        return None if sink is None else self._pending[sink][row_id]

    def moved(self, old_state: str | None, row: Row) -> None:
        """Mirror one row's new state (``old_state`` None: a new row); FIFO order kept."""
        sink = row.sink
        if old_state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) - 1
        if row.state == "dead":
            self._dead_n[sink] = self._dead_n.get(sink, 0) + 1
        bucket = self._pending.setdefault(sink, OrderedDict())
        if row.state != "pending":
            self.drop(row.id)
            return
        out_of_order = row.id not in bucket and bool(bucket) and row.id < next(reversed(bucket))
        bucket[row.id] = row
        self._sink_of[row.id] = sink
        if out_of_order:  # a replayed row goes back to its FIFO place
            self._pending[sink] = OrderedDict(sorted(bucket.items()))

    def drop(self, row_id: int) -> None:
        """A pending row gone (sent, dead or cancelled)."""
        sink = self._sink_of.pop(row_id, None)
        if sink is not None:
            del self._pending[sink][row_id]

    def forget_dead(self, sink: str, n: int = 1) -> None:
        self._dead_n[sink] = self._dead_n.get(sink, 0) - n

    def dead_counted(self, sink: str, n: int) -> None:
        """``n`` dead rows of ``sink`` not mirrored one by one (read at startup)."""
        self._dead_n[sink] = self._dead_n.get(sink, 0) + n

    def due(self, sink: str, now: float, limit: int) -> list[Row]:
        out = []
        for row in self._pending.get(sink, {}).values():
            if row.next_attempt_at <= now:
                out.append(row)
                if len(out) >= limit:
                    break
        return out

    def next_due(self, sink: str) -> float | None:
        pending = self._pending.get(sink)
        return min((r.next_attempt_at for r in pending.values()), default=None) if pending else None

    def counts(self) -> dict[tuple[str, str], int]:
        out = {(sink, "pending"): len(rows) for sink, rows in self._pending.items() if rows}
        out.update({(sink, "dead"): n for sink, n in self._dead_n.items() if n})
        return out
