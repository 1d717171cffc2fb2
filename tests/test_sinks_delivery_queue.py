"""Outbox contract, run against every implementation (add yours to IMPLEMENTATIONS)."""

from __future__ import annotations

import asyncio
import importlib

import pytest

from wtwin.detect.alert import Alert
from wtwin.sinks.delivery_queue import Outcome
from wtwin.sinks.memory_outbox import MemoryOutbox


def _implementations():
    impls = [("memory", lambda tmp: MemoryOutbox())]
    try:  # the durable one, when it exists: SqliteOutbox(path)
        mod = importlib.import_module("wtwin.daemon.store.deliveries")
        impls.append(("sqlite", lambda tmp: mod.SqliteOutbox(tmp / "outbox.db")))
    except (ImportError, AttributeError):
        pass
    return impls


IMPLEMENTATIONS = _implementations()


def alert(run="r", kind="drift", status="firing", started_at=100.0) -> Alert:
    return Alert(run=run, kind=kind, severity="warning", status=status, step=1, started_at=started_at)


@pytest.fixture(params=[name for name, _ in IMPLEMENTATIONS])
def outbox(request, tmp_path):
    factory = dict(IMPLEMENTATIONS)[request.param]
    box = factory(tmp_path)
    yield box
    asyncio.run(box.aclose())


def run(coro):
    return asyncio.run(coro)


class TestOutboxContract:
    def test_put_creates_one_pending_row_per_sink(self, outbox):
        """put commits a pending row per sink, due now, with zero attempts."""
        rows = run(outbox.put(alert(), ["slack", "hook"], now=5.0))
        assert [(r.sink, r.state, r.attempts, r.next_attempt_at) for r in rows] == [
            ("slack", "pending", 0, 5.0), ("hook", "pending", 0, 5.0)]
        assert outbox.counts() == {("slack", "pending"): 1, ("hook", "pending"): 1}

    def test_put_is_idempotent_per_key(self, outbox):
        """The same transition offered twice adds no row."""
        first = run(outbox.put(alert(), ["slack"], now=5.0))
        again = run(outbox.put(alert(), ["slack"], now=6.0))
        assert [r.id for r in first] == [r.id for r in again]
        assert outbox.counts()[("slack", "pending")] == 1

    def test_due_is_fifo_respects_time_and_limit(self, outbox):
        """due returns pending rows whose time has come, oldest first, at most limit."""
        ids = [run(outbox.put(alert(run=f"r{i}"), ["s"], now=1.0))[0].id for i in range(4)]
        run(outbox.record(ids[1], state="pending", attempts=1, next_attempt_at=50.0, error="x", now=2.0))
        assert [r.id for r in run(outbox.due("s", now=10.0, limit=10))] == [ids[0], ids[2], ids[3]]
        assert [r.id for r in run(outbox.due("s", now=60.0, limit=2))] == ids[:2]
        assert run(outbox.next_due("s")) == 1.0
        assert run(outbox.due("other", now=60.0, limit=5)) == []
        assert run(outbox.next_due("other")) is None

    def test_record_delivered_leaves_pending(self, outbox):
        """A delivered row is no longer due nor counted."""
        (row,) = run(outbox.put(alert(), ["s"], now=1.0))
        run(outbox.record(row.id, state="delivered", attempts=1, next_attempt_at=1.0, error="", now=2.0))
        assert run(outbox.due("s", now=9.0, limit=5)) == []
        assert outbox.counts().get(("s", "pending"), 0) == 0

    def test_dead_listed_and_redelivered(self, outbox):
        """Dead rows are listed with their error; redeliver makes them pending again with zero attempts."""
        a, b = (run(outbox.put(alert(run=r), ["s"], now=1.0))[0] for r in ("a", "b"))
        run(outbox.record(a.id, state="dead", attempts=3, next_attempt_at=1.0, error="HTTP 500", now=2.0))
        run(outbox.record(b.id, state="dead", attempts=1, next_attempt_at=1.0, error="HTTP 400", now=2.0))
        dead = run(outbox.dead())
        assert [(r.id, r.attempts, r.last_error) for r in dead] == [(a.id, 3, "HTTP 500"), (b.id, 1, "HTTP 400")]
        assert outbox.counts()[("s", "dead")] == 2
        assert run(outbox.redeliver(ids=[b.id], now=3.0)) == 1
        assert run(outbox.redeliver(sink="s", now=3.0)) == 1
        due = run(outbox.due("s", now=3.0, limit=5))
        assert [(r.id, r.attempts, r.state) for r in due] == [(a.id, 0, "pending"), (b.id, 0, "pending")]
        assert outbox.counts().get(("s", "dead"), 0) == 0

    def test_dead_filter_by_sink(self, outbox):
        """dead(sink) lists only that sink's rows."""
        rows = run(outbox.put(alert(), ["x", "y"], now=1.0))
        for r in rows:
            run(outbox.record(r.id, state="dead", attempts=1, next_attempt_at=1.0, error="e", now=1.0))
        assert [r.sink for r in run(outbox.dead("y"))] == ["y"]

    def test_rows_carry_the_alert(self, outbox):
        """The alert round-trips unchanged, with its idempotency key."""
        a = Alert(run="r", kind="nonfinite", severity="critical", status="firing", step=7, started_at=1.5,
                  loss=float("inf"), message="loss is inf", labels={"team": "x"})
        (row,) = run(outbox.put(a, ["s"], now=1.0))
        (due,) = run(outbox.due("s", now=1.0, limit=1))
        assert due.alert == a and due.idempotency_key == a.idempotency_key == row.idempotency_key


    def test_put_many_commits_a_slice(self, outbox):
        """put_many returns one list of rows per item, FIFO per sink; a repeat in the slice adds nothing."""
        items = [(alert(run="a"), ["s", "t"]), (alert(run="b"), ["s"]), (alert(run="a"), ["s"])]
        a_rows, b_rows, again = run(outbox.put_many(items, now=2.0))
        assert [(r.sink, r.alert.run, r.state, r.next_attempt_at) for r in a_rows + b_rows] == [
            ("s", "a", "pending", 2.0), ("t", "a", "pending", 2.0), ("s", "b", "pending", 2.0)]
        assert [r.id for r in again] == [a_rows[0].id]
        assert [r.alert.run for r in run(outbox.due("s", now=2.0, limit=10))] == ["a", "b"]
        assert outbox.counts() == {("s", "pending"): 2, ("t", "pending"): 1}

    def test_record_many_applies_every_outcome(self, outbox):
        """record_many moves each row as record would: retry stays pending, delivered and dead leave."""
        rows = run(outbox.put_many([(alert(run=r), ["s"]) for r in "abc"], now=1.0))
        a, b, c = (found[0].id for found in rows)
        run(outbox.record_many([Outcome(a, "pending", 1, 9.0, "refused"), Outcome(b, "delivered", 1, 1.0),
                                Outcome(c, "dead", 1, 1.0, "HTTP 400")], now=2.0))
        assert [(r.id, r.attempts, r.last_error) for r in run(outbox.due("s", now=9.0, limit=5))] == [
            (a, 1, "refused")]
        assert [(r.id, r.last_error) for r in run(outbox.dead())] == [(c, "HTTP 400")]
        assert outbox.counts() == {("s", "pending"): 1, ("s", "dead"): 1}

    def test_record_many_is_all_or_nothing(self, outbox):
        """An unknown row id fails the whole batch with KeyError and changes nothing."""
        (row,) = run(outbox.put(alert(), ["s"], now=1.0))
        with pytest.raises(KeyError):
            run(outbox.record_many([Outcome(row.id, "dead", 1, 1.0, "x"), Outcome(10_000, "dead", 1, 1.0)],
                                   now=2.0))
        assert [(r.id, r.state) for r in run(outbox.due("s", now=1.0, limit=5))] == [(row.id, "pending")]
        assert run(outbox.dead()) == []

    def test_outcome_rejects_unknown_state(self):
        """An outcome's state is one of STATES."""
        with pytest.raises(ValueError, match="state must be one of"):
            Outcome(1, "lost", 1, 1.0)

    def test_staged_rows_count_once_committed(self, outbox):
        """A staged write changes nothing until it is committed; then its rows are due."""
        from wtwin.sinks.routing import Plan

        async def go():
            staged = outbox.stage([Plan(alert(), {"s": 1.0, "t": 5.0})], 1.0)
            before = outbox.counts()
            rows = await outbox.commit(staged)
            return before, rows

        before, (rows,) = run(go())
        assert before == {}
        assert [(r.sink, r.next_attempt_at) for r in rows] == [("s", 1.0), ("t", 5.0)]
        assert [r.sink for r in run(outbox.due("s", 1.0, 10)) + run(outbox.due("t", 1.0, 10))] == ["s"]
        assert outbox.counts() == {("s", "pending"): 1, ("t", "pending"): 1}

    def test_full_sink_gets_a_dead_row(self, outbox):
        """A sink whose queue is full gets the row written dead ('queue full'), redeliverable."""
        from wtwin.sinks.routing import Plan

        async def go():
            return await outbox.commit(outbox.stage([Plan(alert(), {"s": 1.0})], 1.0, full=frozenset({"s"})))

        ((row,),) = run(go())
        assert (row.state, row.last_error) == ("dead", "queue full")
        assert outbox.counts() == {("s", "dead"): 1}
        assert run(outbox.redeliver("s", now=2.0)) == 1 and outbox.counts() == {("s", "pending"): 1}


class TestMemoryBounds:
    def test_dead_rows_capped(self):
        """Beyond max_dead the oldest dead rows are forgotten."""
        box = MemoryOutbox(max_dead=3)
        for i in range(5):
            (row,) = run(box.put(alert(run=f"r{i}"), ["s"], now=1.0))
            run(box.record(row.id, state="dead", attempts=1, next_attempt_at=1.0, error="e", now=1.0))
        assert [r.alert.run for r in run(box.dead())] == ["r2", "r3", "r4"]
        assert box.counts()[("s", "dead")] == 3

    def test_delivered_rows_forgotten(self):
        """Delivered rows are kept only up to keep_delivered (then a re-put is a new row)."""
        box = MemoryOutbox(keep_delivered=1)
        ids = []
        for run_name in ("a", "b"):
            (row,) = run(box.put(alert(run=run_name), ["s"], now=1.0))
            run(box.record(row.id, state="delivered", attempts=1, next_attempt_at=1.0, error="", now=1.0))
            ids.append(row.id)
        (again,) = run(box.put(alert(run="a"), ["s"], now=2.0))
        assert again.id not in ids
