"""Delivery: isolation between sinks, bounded queues, redelivery, log sink, registry, metrics."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from wtwin.detect.alert import Alert
from wtwin.sinks.delivery import Delivery
from wtwin.sinks.errors import ConfigError
from wtwin.sinks.log import LogConfig, LogSink
from wtwin.sinks.metrics import DeliveryCollector
from wtwin.sinks.memory_outbox import MemoryOutbox
from wtwin.sinks.registry import DeliveryConfig
from wtwin.sinks.retry import RetryPolicy
from wtwin.sinks.routing import RouteConfig
from http_recorder import Recorder, Reply
from wtwin.sinks.webhook import WebhookConfig, WebhookSink

FAST = RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.02)


def alert(run="r", kind="drift", status="firing") -> Alert:
    return Alert(run=run, kind=kind, severity="warning", status=status, step=3, started_at=10.0)


async def until(pred, timeout=60.0):  # guards a hang: never the machine's speed
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def hook(name, url, **kw):
    return WebhookSink.build(WebhookConfig(name=name, url=url, **kw), {})


class TestIsolation:
    def test_slow_sink_does_not_stall_others(self):
        """A sink whose server takes 5 s to answer does not delay a healthy sink: the
        healthy one has every alert before the slow one's first answer (an order, not a
        time budget: a stalled healthy sink would get them only after that answer)."""
        async def scenario():
            async with Recorder(default=Reply(200, "", delay_s=5.0)) as slow, Recorder() as fast:
                d = Delivery(sinks=[hook("slow", slow.url, timeout_s=30.0), hook("fast", fast.url)],
                             outbox=MemoryOutbox(), policy=FAST)
                await d.start()
                for i in range(3):
                    d.submit_nowait(alert(run=f"r{i}"))
                got = await fast.wait_for(3)
                answered = d.counters.values[("slow", "success")]
                await d.aclose()
                return got, answered, list(slow.requests)
        got, answered, slow_seen = asyncio.run(scenario())
        assert len(slow_seen) == 1 and answered == 0
        assert got[-1].at < slow_seen[0].at + 5.0

    def test_refusing_and_blackholed_sinks_do_not_delay_a_healthy_one(self):
        """With one sink refused and one whose endpoint never accepts, a healthy sink still gets
        every alert at once, and the dead endpoints see one attempt per backoff, not one per alert."""
        import random
        import socket

        async def scenario():
            with socket.socket() as refused, socket.socket() as hole:
                refused.bind(("127.0.0.1", 0))  # bound, never listening: connect() is refused
                hole.bind(("127.0.0.1", 0))
                hole.listen(64)  # listening, never accepting: the request hangs until timeout_s
                async with Recorder() as fast:
                    sinks = [hook("refused", f"http://127.0.0.1:{refused.getsockname()[1]}/"),
                             hook("hole", f"http://127.0.0.1:{hole.getsockname()[1]}/", timeout_s=60.0),
                             hook("fast", fast.url)]
                    # seeded: the first backoff drawn (the refused sink's) is 8.4 s
                    d = Delivery(sinks=sinks, outbox=MemoryOutbox(), rng=random.Random(0),
                                 policy=RetryPolicy(max_attempts=100, base_s=10.0, cap_s=10.0))
                    await d.start()
                    t0 = time.monotonic()
                    for i in range(20):
                        d.submit_nowait(alert(run=f"r{i}"))
                    await fast.wait_for(20)
                    elapsed = time.monotonic() - t0
                    await until(lambda: d.counters.values[("refused", "retry")] >= 1)
                    counts = dict(d.counters.values)
                    await d.aclose()
                    return elapsed, counts
        elapsed, counts = asyncio.run(scenario())
        # stalled behind the refused sink's backoff, the healthy one would wait 8.4 s; behind
        # the hole, 60 s (its timeout): under 8 s, it waited for neither, on any machine
        assert elapsed < 8.0 and counts[("fast", "success")] == 20
        assert counts[("refused", "retry")] == 1  # the first attempt failed; the next waits 8.4 s
        assert counts[("hole", "retry")] == 0 and counts[("hole", "success")] == 0  # still waiting

    def test_submit_never_blocks_and_intake_is_bounded(self, tmp_path):
        """submit_nowait returns at once; beyond intake_size alerts waiting for their commit it
        drops, logs ERROR and counts."""
        from wtwin.daemon.store.deliveries import SqliteOutbox

        async def scenario():
            box = SqliteOutbox(tmp_path / "o.db")  # its commits run once the loop is free
            d = Delivery(sinks=[LogSink(LogConfig())], outbox=box, intake_size=2)
            with capture_logs() as logs:
                results = [d.submit_nowait(alert(run=f"r{i}")) for i in range(3)]
            await until(lambda: box.counts().get(("log", "pending")) == 2)
            await box.aclose()
            return d, results, logs
        d, results, logs = asyncio.run(scenario())
        assert results == [True, True, False] and d.counters.intake_dropped == 1
        assert [e["log_level"] for e in logs if e["event"] == "alert_dropped"] == ["error"]

    def test_sink_queue_bounded(self):
        """A down sink holds at most queue_size pending alerts; the rest are dead as dropped."""
        async def scenario():
            async with Recorder() as closed:
                url = closed.url
            sink = hook("down", url, queue_size=2)
            outbox = MemoryOutbox()
            d = Delivery(sinks=[sink], outbox=outbox, policy=RetryPolicy(max_attempts=100, base_s=5, cap_s=5))
            for i in range(5):
                await d.submit(alert(run=f"r{i}"))
            return d, outbox
        d, outbox = asyncio.run(scenario())
        assert outbox.counts() == {("down", "pending"): 2, ("down", "dead"): 3}
        assert d.counters.values[("down", "dropped")] == 3


class TestBackoff:
    def test_dead_endpoint_backs_off_as_a_whole(self):
        """Fresh alerts do not reset the backoff: attempt k+1 waits the k-th full-jitter delay."""
        import random

        policy = RetryPolicy(max_attempts=100, base_s=0.02, cap_s=0.16)
        expected = random.Random(7)
        delays = [policy.backoff(k, expected) for k in range(1, 8)]

        async def scenario():
            async with Recorder() as closed:
                url = closed.url
            d = Delivery(sinks=[hook("down", url)], outbox=MemoryOutbox(), policy=policy, rng=random.Random(7))
            await d.start()
            for i in range(30):
                d.submit_nowait(alert(run=f"r{i}"))
            await until(lambda: d.counters.values[("down", "retry")] >= 1)
            t1 = time.monotonic()
            await until(lambda: d.counters.values[("down", "retry")] >= 8)
            elapsed = time.monotonic() - t1
            await d.aclose()
            return elapsed
        assert asyncio.run(scenario()) >= sum(delays) - 0.01



class TestOutboxWrites:
    def test_queued_alerts_share_a_durable_transaction_and_a_failure_is_one_write(self, tmp_path):
        """50 alerts queued while the writer is busy are committed in one FULL transaction;
        each failed attempt on a refusing endpoint is one outbox write (the daemon's SQLite
        outbox and writer thread)."""
        import threading

        from wtwin.daemon.store.db import connect, open_db
        from wtwin.daemon.store.deliveries import SqliteOutbox
        from wtwin.daemon.store.writer import Writer

        async def scenario():
            async with Recorder() as closed:
                url = closed.url
            conn, lock = open_db(str(tmp_path / "s.db"))
            writer = Writer(conn, asyncio.get_running_loop())
            calls = []

            def execute(fn, *, full=True):
                calls.append(full)
                return writer.call(fn, full=full)

            outbox = SqliteOutbox(execute=execute, conn=connect(str(tmp_path / "s.db")))
            policy = RetryPolicy(max_attempts=100, base_s=0.05, cap_s=0.05)
            sink = hook("down", url, max_batch=10)
            attempts, real_send = [], sink.send

            async def counted_send(alerts):  # the real send, counted (batches vary in size)
                attempts.append(len(alerts))
                return await real_send(alerts)

            sink.send = counted_send
            d = Delivery(sinks=[sink], outbox=outbox, policy=policy)
            await d.start()
            started, busy = threading.Event(), threading.Event()
            writer.submit(lambda conn: started.set() or busy.wait(10))  # the writer is busy meanwhile
            await until(started.is_set)
            for i in range(50):
                d.submit_nowait(alert(run=f"r{i}"))
            await until(lambda: calls.count(True) == 50)  # all 50 queued
            busy.set()
            seen = []  # (writes so far, attempts so far), read together
            await until(lambda: seen.append((list(calls), len(attempts)))
                        or d.counters.values[("down", "retry")] >= 30)
            full = writer.full_commits
            await d.aclose()
            writer.close()
            return seen[-1], full

        (calls, n), full = asyncio.run(scenario())
        assert full == 1
        assert n >= 3
        # one write per failed attempt; the newest attempt's write may not have landed yet
        assert n - 1 <= calls.count(False) <= n

class TestRedeliver:
    def test_redeliver_sends_dead_rows_again(self):
        """Dead alerts are redelivered once the endpoint is back, with the same webhook-id."""
        async def scenario():
            async with Recorder([Reply(500)] * 3) as srv:
                outbox = MemoryOutbox()
                d = Delivery(sinks=[hook("h", srv.url)], outbox=outbox, policy=FAST)
                await d.start()
                d.submit_nowait(alert())
                await until(lambda: outbox.counts().get(("h", "dead")) == 1)
                assert await d.redeliver("h") == 1
                await srv.wait_for(4)
                await until(lambda: d.counters.values[("h", "success")] == 1)
                await d.aclose()
                return srv, outbox
        srv, outbox = asyncio.run(scenario())
        assert len({r.headers["webhook-id"] for r in srv.requests}) == 1
        assert outbox.counts().get(("h", "dead"), 0) == 0

    def test_pending_rows_picked_up_at_start(self):
        """Rows committed before start (say, left from a previous run) are delivered."""
        async def scenario():
            async with Recorder() as srv:
                outbox = MemoryOutbox()
                await outbox.put(alert(), ["h"], now=time.time())
                d = Delivery(sinks=[hook("h", srv.url)], outbox=outbox, policy=FAST)
                await d.start()
                await srv.wait_for(1)
                await d.aclose()
                return srv
        assert len(asyncio.run(scenario()).requests) == 1


class TestRoutingInDelivery:
    def test_routes_pick_sinks(self):
        """Only routed sinks get the alert; unknown sink names are rejected at construction."""
        async def scenario():
            async with Recorder() as a, Recorder() as b:
                routes = [RouteConfig(sinks=("a",), kinds=("nonfinite",)), RouteConfig(sinks=("b",))]
                d = Delivery(sinks=[hook("a", a.url), hook("b", b.url)], outbox=MemoryOutbox(), routes=routes,
                             policy=FAST)
                await d.start()
                d.submit_nowait(alert(kind="nonfinite"))
                d.submit_nowait(alert(kind="drift"))
                await a.wait_for(1)
                await b.wait_for(1)
                await d.aclose()
                return a, b
        a, b = asyncio.run(scenario())
        assert a.requests[0].json()["alerts"][0]["labels"]["kind"] == "nonfinite"
        assert b.requests[0].json()["alerts"][0]["labels"]["kind"] == "drift"
        with pytest.raises(ValueError, match="unknown sinks"):
            Delivery(sinks=[LogSink(LogConfig())], outbox=MemoryOutbox(), routes=[RouteConfig(sinks=("x",))])

    def test_severity_upgrade_delivered(self):
        """warning then critical for one (run, kind): both reach the sink, with different ids."""
        async def scenario():
            async with Recorder() as srv:
                d = Delivery(sinks=[hook("h", srv.url)], outbox=MemoryOutbox(), policy=FAST)
                await d.start()
                d.submit_nowait(alert())
                d.submit_nowait(Alert(run="r", kind="drift", severity="critical", status="firing", step=9,
                                      started_at=10.0))
                await srv.wait_for(2)
                await d.aclose()
                return srv
        first, second = asyncio.run(scenario()).requests
        assert [r.json()["alerts"][0]["labels"]["severity"] for r in (first, second)] == ["warning", "critical"]
        assert first.headers["webhook-id"] != second.headers["webhook-id"]

    def test_for_hold_released_when_due(self):
        """A held alert is delivered once for_s has passed, without another submit."""
        async def scenario():
            async with Recorder() as srv:
                d = Delivery(sinks=[hook("h", srv.url)], outbox=MemoryOutbox(),
                             routes=[RouteConfig(sinks=("h",), for_s=0.2)], policy=FAST)
                await d.start()
                t0 = time.monotonic()
                d.submit_nowait(Alert(run="r", kind="drift", severity="warning", status="firing", step=3,
                                      started_at=time.time()))
                await srv.wait_for(1)
                await d.aclose()
                return time.monotonic() - t0
        assert asyncio.run(scenario()) >= 0.2


class TestLogSink:
    def test_alert_as_structlog_event(self):
        """The log sink emits one 'alert' event per alert with its fields."""
        async def scenario():
            d = Delivery(sinks=[LogSink(LogConfig())], outbox=MemoryOutbox())
            await d.start()
            with capture_logs() as logs:
                d.submit_nowait(alert(kind="nonfinite"))
                await until(lambda: d.counters.values[("log", "success")] == 1)
            await d.aclose()
            return logs
        (event,) = [e for e in asyncio.run(scenario()) if e["event"] == "alert"]
        assert event["run"] == "r" and event["kind"] == "nonfinite" and event["status"] == "firing"
        assert event["log_level"] == "warning" and event["idempotency_key"] == alert(kind="nonfinite").idempotency_key


class TestMetrics:
    def test_collector_exports_counters_and_outbox(self):
        """deliveries_total by sink/outcome and outbox pending/dead are read at scrape time."""
        async def scenario():
            async with Recorder([Reply(400)]) as srv:
                outbox = MemoryOutbox()
                d = Delivery(sinks=[hook("h", srv.url)], outbox=outbox, policy=FAST)
                await d.start()
                d.submit_nowait(alert(run="a"))
                d.submit_nowait(alert(run="b"))
                await until(lambda: d.counters.values[("h", "success")] == 1)
                await d.aclose()
                return d
        d = asyncio.run(scenario())
        reg = CollectorRegistry()
        reg.register(DeliveryCollector(d))
        get = reg.get_sample_value
        assert get("wtwind_deliveries_total", {"sink": "h", "outcome": "dead"}) == 1
        assert get("wtwind_deliveries_total", {"sink": "h", "outcome": "success"}) == 1
        assert get("wtwind_deliveries_total", {"sink": "h", "outcome": "retry"}) == 0
        assert get("wtwind_outbox_dead", {"sink": "h"}) == 1
        assert get("wtwind_outbox_pending", {"sink": "h"}) == 0
        assert get("wtwind_sink_disabled", {"sink": "h"}) == 0
        assert get("wtwind_alerts_dropped_total") == 0


class TestDeliveryConfig:
    def test_delivery_config_validates(self):
        """DeliveryConfig checks its own fields."""
        with pytest.raises(ConfigError, match="intake_size"):
            DeliveryConfig(intake_size=0)
