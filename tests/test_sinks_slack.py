"""Slack sink against a real local server that answers as Slack's incoming webhooks do."""

from __future__ import annotations

import asyncio
import time

import pytest
from structlog.testing import capture_logs

from wtwin.detect.alert import Alert
from wtwin.sinks.delivery import Delivery
from wtwin.sinks.errors import ConfigError
from wtwin.sinks.memory_outbox import MemoryOutbox
from wtwin.sinks.retry import RetryPolicy
from wtwin.sinks.slack import SlackConfig, SlackSink, render
from http_recorder import SLACK, Recorder, Reply

FAST = RetryPolicy(max_attempts=4, base_s=0.01, cap_s=0.05)


def alert(run="gpt-7b", kind="drift", status="firing", **kw) -> Alert:
    base = dict(run=run, kind=kind, severity="warning", status=status, step=1200, started_at=1_700_000_000.0,
                loss=2.41, forecast=2.3, W=3.2, message="loss 4.1 sigma above forecast")
    base.update(kw)
    return Alert(**base)


async def until(pred, timeout=60.0):  # guards a hang: never the machine's speed
    """Poll a condition with a deadline (state owned by the same loop)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def deliver(script, alerts, *, policy=FAST, expect=1, **cfg):
    """Run a Delivery with one Slack sink against a recorder; returns (recorder, delivery, outbox)."""
    async with Recorder(script) as slack:
        config = SlackConfig(name="team", url_env="SLACK_URL", link_base_url="https://wtwin.example",
                             min_interval_s=cfg.pop("min_interval_s", 0.01), **cfg)
        sink = SlackSink.build(config, {"SLACK_URL": slack.url})
        outbox = MemoryOutbox()
        d = Delivery(sinks=[sink], outbox=outbox, policy=policy)
        await d.start()
        for a in alerts:
            d.submit_nowait(a)
        await slack.wait_for(expect)
        await until(lambda: not outbox.counts().get(("team", "pending")))
        await d.aclose()
        return slack, d, outbox


class TestPayload:
    def test_single_alert_exact_payload(self):
        """One alert: text fallback plus a header and one section with the six fields and a link."""
        body = render([alert()], "https://wtwin.example")
        link = "https://wtwin.example/runs/gpt-7b"
        assert body == {
            "text": "[FIRING] drift (warning) on run gpt-7b at step 1200: loss 2.41 vs forecast 2.3, W=3.20"
                    f" - loss 4.1 sigma above forecast {link}",
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": "[FIRING] drift (warning) on run gpt-7b"}},
                {"type": "section",
                 "text": {"type": "mrkdwn", "text": f":large_orange_circle: *Firing*: drift on <{link}|gpt-7b>\n"
                                                    "loss 4.1 sigma above forecast"},
                 "fields": [
                     {"type": "mrkdwn", "text": "*Run*\ngpt-7b"},
                     {"type": "mrkdwn", "text": "*Kind*\ndrift"},
                     {"type": "mrkdwn", "text": "*Severity*\nwarning"},
                     {"type": "mrkdwn", "text": "*Step*\n1200"},
                     {"type": "mrkdwn", "text": "*Loss vs forecast*\n2.41 vs 2.3"},
                     {"type": "mrkdwn", "text": "*W*\n3.20"},
                 ]},
            ],
        }

    def test_resolved_message(self):
        """A resolved alert says so in the text and with a check mark."""
        body = render([alert(status="resolved", ended_at=1_700_000_100.0)], None)
        assert body["text"].startswith("[RESOLVED] drift (warning) on run gpt-7b at step 1200")
        assert body["blocks"][1]["text"]["text"].startswith(":white_check_mark: *Resolved*: drift on `gpt-7b`")

    def test_escapes_mrkdwn_and_link_template(self):
        """Run names are escaped in mrkdwn; a {run} template is filled URL-encoded."""
        body = render([alert(run="a<b>&c", loss=None, forecast=None, W=None)], "https://g.example/d/x?var-run={run}")
        section = body["blocks"][1]
        assert "<https://g.example/d/x?var-run=a%3Cb%3E%26c|a&lt;b&gt;&amp;c>" in section["text"]["text"]
        assert section["fields"][4]["text"] == "*Loss vs forecast*\nn/a vs n/a"

    def test_batch_header_counts(self):
        """Several alerts: one header counting firing/resolved, one section each, dividers between."""
        body = render([alert(run="a"), alert(run="b", status="resolved"), alert(run="c")])
        assert body["blocks"][0]["text"]["text"] == "3 wtwin alerts (2 firing, 1 resolved)"
        assert [b["type"] for b in body["blocks"]] == ["header", "section", "divider", "section", "divider", "section"]
        assert body["text"].count("\n") == 3


class TestDelivery:
    def test_delivers_exact_body(self):
        """What reaches the server is exactly render() of the alert, as JSON."""
        slack, d, _ = asyncio.run(deliver([], [alert()]))
        (req,) = slack.requests
        assert req.method == "POST" and req.headers["Content-Type"].startswith("application/json")
        assert req.json() == render([alert()], "https://wtwin.example")
        assert d.counters.values[("team", "success")] == 1

    def test_retries_on_temporary_error(self):
        """500 rollup_error, then 429, then ok: delivered on the third attempt."""
        script = [SLACK["rollup_error"], Reply(429, "rate_limited", {"Retry-After": "0.05"}), SLACK["ok"]]
        slack, d, outbox = asyncio.run(deliver(script, [alert()], expect=3))
        assert len(slack.requests) == 3
        assert slack.requests[0].body == slack.requests[2].body
        assert d.counters.values[("team", "retry")] == 2
        assert d.counters.values[("team", "success")] == 1
        assert outbox.counts().get(("team", "dead"), 0) == 0

    def test_honours_retry_after(self):
        """A 429 with Retry-After: 1 delays the next attempt by at least a second."""
        script = [SLACK["rate_limited"], SLACK["ok"]]
        slack, _, _ = asyncio.run(deliver(script, [alert()], expect=2))
        assert slack.requests[1].at - slack.requests[0].at >= 0.95

    def test_fails_on_permanent_error(self):
        """400 invalid_payload: one attempt, then dead-lettered with the reason."""
        slack, d, outbox = asyncio.run(deliver([SLACK["invalid_payload"]], [alert()]))
        assert len(slack.requests) == 1
        assert d.counters.values[("team", "dead")] == 1
        (row,) = asyncio.run(outbox.dead())
        assert row.attempts == 1 and "invalid_payload" in row.last_error and row.sink == "team"

    def test_dead_after_max_attempts(self):
        """A server that keeps failing gets max_attempts attempts, then the alert is dead."""
        slack, d, outbox = asyncio.run(deliver([Reply(503, "busy")] * 10, [alert()], expect=4))
        assert len(slack.requests) == 4
        assert d.counters.values[("team", "retry")] == 3 and d.counters.values[("team", "dead")] == 1

    @pytest.mark.parametrize("reply", ["channel_not_found", "no_service", "channel_is_archived"])
    def test_gone_webhook_disables_sink(self, reply):
        """404/410/no_service: ERROR naming the sink and why; later alerts are not sent."""
        async def scenario():
            async with Recorder([SLACK[reply]]) as slack:
                sink = SlackSink.build(SlackConfig(name="team", url_env="U", min_interval_s=0.01), {"U": slack.url})
                outbox = MemoryOutbox()
                d = Delivery(sinks=[sink], outbox=outbox, policy=FAST)
                await d.start()
                d.submit_nowait(alert(run="first"))
                await until(lambda: d.workers["team"].disabled is not None)
                d.submit_nowait(alert(run="second"))
                await until(lambda: outbox.counts().get(("team", "dead")) == 2)
                await d.aclose()
                return slack, d
        with capture_logs() as logs:
            slack, d = asyncio.run(scenario())
        assert len(slack.requests) == 1
        assert d.counters.values[("team", "disabled")] == 2
        (err,) = [e for e in logs if e["event"] == "sink_disabled"]
        assert err["log_level"] == "error" and err["sink"] == "team"
        assert SLACK[reply].body in err["reason"] and str(SLACK[reply].status) in err["reason"]

    def test_burst_becomes_one_message(self):
        """Five alerts submitted together go out as one message carrying all five."""
        alerts = [alert(run=f"run-{i}") for i in range(5)]
        slack, d, _ = asyncio.run(deliver([], alerts))
        (req,) = slack.requests
        assert req.json() == render(alerts, "https://wtwin.example")
        assert d.counters.values[("team", "success")] == 5

    def test_burst_larger_than_max_batch_is_split(self):
        """25 alerts with max_batch 20: two messages, 20 then 5, nothing lost."""
        alerts = [alert(run=f"run-{i:02d}") for i in range(25)]
        slack, d, _ = asyncio.run(deliver([], alerts, expect=2))
        first, second = (r.json() for r in slack.requests)
        assert first == render(alerts[:20], "https://wtwin.example")
        assert second == render(alerts[20:], "https://wtwin.example")
        assert len(first["blocks"]) <= 50

    def test_rate_limit_coalesces_what_arrives_while_waiting(self):
        """With min_interval 0.3 s, alerts arriving after the first send wait and go out together."""
        async def scenario():
            async with Recorder() as slack:
                sink = SlackSink.build(SlackConfig(name="team", url_env="U", min_interval_s=0.3, linger_s=0.0),
                                       {"U": slack.url})
                d = Delivery(sinks=[sink], outbox=MemoryOutbox(), policy=FAST)
                await d.start()
                d.submit_nowait(alert(run="a"))
                await slack.wait_for(1)
                for run in ("b", "c", "d"):
                    d.submit_nowait(alert(run=run))
                await slack.wait_for(2)
                await d.aclose()
                return slack
        slack = asyncio.run(scenario())
        first, second = slack.requests
        assert second.at - first.at >= 0.28
        assert second.json()["blocks"][0]["text"]["text"] == "3 wtwin alerts (3 firing, 0 resolved)"

    def test_connection_refused_retries_then_dead(self):
        """Nobody listening: retried as a temporary error, then dead-lettered."""
        async def scenario():
            async with Recorder() as closed:
                url = closed.url
            sink = SlackSink.build(SlackConfig(name="team", url_env="U", min_interval_s=0.01), {"U": url})
            outbox = MemoryOutbox()
            d = Delivery(sinks=[sink], outbox=outbox, policy=RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.02))
            await d.start()
            d.submit_nowait(alert())
            await until(lambda: outbox.counts().get(("team", "dead")) == 1)
            await d.aclose()
            return d, outbox
        d, outbox = asyncio.run(scenario())
        assert d.counters.values[("team", "retry")] == 2
        (row,) = asyncio.run(outbox.dead())
        assert row.attempts == 3 and "Connect" in row.last_error


class TestConfig:
    def test_url_by_reference_only(self):
        """One of url_env/url_file is required; both is an error."""
        with pytest.raises(ConfigError, match="url_env or url_file"):
            SlackConfig(name="team")
        with pytest.raises(ConfigError, match="only one of url_env and url_file"):
            SlackConfig(name="team", url_env="A", url_file="/x")

    def test_unset_env_names_field(self):
        """An unset variable is reported with the field and the variable name."""
        with pytest.raises(ConfigError, match=r"sinks.team.url_env: environment variable NOPE"):
            SlackSink.build(SlackConfig(name="team", url_env="NOPE"), {})

    def test_url_file(self, tmp_path):
        """The URL may come from a file (stripped)."""
        f = tmp_path / "url"
        f.write_text("https://hooks.slack.example/services/T/B/X\n")
        sink = SlackSink.build(SlackConfig(name="team", url_file=str(f)), {})
        assert sink._url == "https://hooks.slack.example/services/T/B/X"

    @pytest.mark.parametrize("kwargs, field", [
        ({"timeout_s": 0}, "timeout_s"), ({"max_batch": 100}, "max_batch"),
        ({"min_interval_s": -1}, "min_interval_s"), ({"link_base_url": "ftp://x"}, "link_base_url"),
        ({"name": "has space"}, "name"), ({"linger_s": 60}, "linger_s"),
    ])
    def test_validation_names_field(self, kwargs, field):
        """Bad values are rejected with the field's name."""
        with pytest.raises(ConfigError, match=field):
            SlackConfig(**{"name": "team", "url_env": "U", **kwargs})
