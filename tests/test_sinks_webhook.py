"""Webhook sink: Alertmanager v4 JSON, Standard Webhooks signatures, against a real receiver."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from wtwin.detect.alert import Alert
from wtwin.sinks.delivery import Delivery
from wtwin.sinks.errors import ConfigError
from wtwin.sinks.memory_outbox import MemoryOutbox
from wtwin.sinks.retry import RetryPolicy
from http_recorder import Recorder, Reply
from wtwin.sinks.webhook import WebhookConfig, WebhookSink

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
FAST = RetryPolicy(max_attempts=4, base_s=0.01, cap_s=0.05)
T0 = 1_700_000_000.0


def alert(status="firing", **kw) -> Alert:
    base = dict(run="gpt-7b", kind="drift", severity="warning", status=status, step=1200, started_at=T0,
                loss=2.41, forecast=2.3, W=3.2, message="loss 4.1 sigma above forecast", labels={"team": "llm"})
    base.update(kw)
    return Alert(**base)


def verifier(secret=SECRET):
    """A receiver check that answers 401 unless standardwebhooks verifies the request."""
    wh = Webhook(secret)

    def check(req):
        try:
            wh.verify(req.body, req.headers)
        except WebhookVerificationError:
            return Reply(401, "bad signature")
        return None
    return check


async def until(pred, timeout=60.0):  # guards a hang: never the machine's speed
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def deliver(script, alerts, *, expect=1, check=None, env=None, **cfg):
    async with Recorder(script, check=check if check is not None else verifier()) as hook:
        config = WebhookConfig(name="am", url=hook.url, secret_env="HOOK_SECRET", **cfg)
        sink = WebhookSink.build(config, env or {"HOOK_SECRET": SECRET})
        outbox = MemoryOutbox()
        d = Delivery(sinks=[sink], outbox=outbox, policy=FAST)
        await d.start()
        for a in alerts:
            d.submit_nowait(a)
        await hook.wait_for(expect)
        await until(lambda: not outbox.counts().get(("am", "pending")))
        await d.aclose()
        return hook, d, outbox


EXPECTED_ALERT = {
    "status": "firing",
    "labels": {"team": "llm", "alertname": "WTwinLossDegradation", "run": "gpt-7b", "kind": "drift",
               "severity": "warning"},
    "annotations": {"summary": "drift on run gpt-7b at step 1200", "description": "loss 4.1 sigma above forecast",
                    "details": "",
                    "step": "1200", "loss": "2.41", "forecast": "2.3", "W": "3.2",
                    "idempotency_key": alert().idempotency_key},
    "startsAt": "2023-11-14T22:13:20.000Z",
    "endsAt": "0001-01-01T00:00:00Z",
    "generatorURL": "https://wtwin.example/runs/gpt-7b",
    "fingerprint": alert().fingerprint,
}


class TestPayload:
    def test_signature_is_the_spec_formula(self):
        """The library-made signature equals the spec's HMAC-SHA256 of "<id>.<ts>.<body>"."""
        import hashlib
        import hmac

        from wtwin.sinks.webhook import sign, signing_key

        key = signing_key(SECRET)
        body = b'{"version":"4","alerts":[]}'
        want = base64.b64encode(hmac.new(key, b"msg_1.1700000000." + body, hashlib.sha256).digest()).decode()
        assert sign(key, "msg_1", 1_700_000_000, body) == "v1," + want

    def test_alertmanager_v4_shape_exact(self):
        """The body is exactly Alertmanager's webhook document, verified by standardwebhooks."""
        hook, d, _ = asyncio.run(deliver([], [alert()], external_url="http://wtwind.local:9464",
                                         link_base_url="https://wtwin.example"))
        (req,) = hook.requests
        payload = Webhook(SECRET).verify(req.body, req.headers)
        assert payload == {
            "version": "4",
            "groupKey": '{}:{kind="drift", run="gpt-7b"}',
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": "am",
            "groupLabels": {"run": "gpt-7b", "kind": "drift"},
            "commonLabels": EXPECTED_ALERT["labels"],
            "commonAnnotations": EXPECTED_ALERT["annotations"],
            "externalURL": "http://wtwind.local:9464",
            "alerts": [EXPECTED_ALERT],
        }
        assert d.counters.values[("am", "success")] == 1

    def test_signature_headers(self):
        """webhook-id is the idempotency key; the timestamp is now; signature is v1,<base64>."""
        hook, _, _ = asyncio.run(deliver([], [alert()]))
        h = hook.requests[0].headers
        assert h["webhook-id"] == alert().idempotency_key
        assert abs(int(h["webhook-timestamp"]) - time.time()) < 30
        assert h["webhook-signature"].startswith("v1,") and len(base64.b64decode(h["webhook-signature"][3:])) == 32

    def test_wrong_secret_fails_verification(self):
        """A receiver holding another secret rejects the message (and 401 is permanent)."""
        other = "whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()
        hook, d, _ = asyncio.run(deliver([], [alert()], check=verifier(other)))
        assert d.counters.values[("am", "dead")] == 1

    def test_resolved_has_ends_at(self):
        """A resolved alert carries endsAt and status resolved at both levels."""
        hook, _, _ = asyncio.run(deliver([], [alert(), alert(status="resolved", ended_at=T0 + 90.5)], expect=2))
        doc = hook.requests[1].json()
        assert doc["status"] == "resolved" and doc["alerts"][0]["status"] == "resolved"
        assert doc["alerts"][0]["endsAt"] == "2023-11-14T22:14:50.500Z"

    def test_configured_headers_sent(self):
        """Configured headers are sent as given; a secret one comes by reference (headers_env)."""
        hook, _, _ = asyncio.run(deliver([], [alert()], headers={"X-Team": "llm"},
                                         headers_env={"Authorization": "HOOK_AUTH"},
                                         env={"HOOK_SECRET": SECRET, "HOOK_AUTH": "Bearer t"}))
        h = hook.requests[0].headers
        assert h["X-Team"] == "llm" and h["Authorization"] == "Bearer t"

    def test_literal_secrets_are_refused_pointing_to_env_or_file(self):
        """A URL with credentials or a query, a Slack hook, a secret-looking header: refused."""
        for url in ("https://user:pw@h.example/x", "https://h.example/x?token=abc",
                    "https://hooks.slack.com/services/T/B/X"):
            with pytest.raises(ConfigError, match="url_env or url_file") as err:
                WebhookConfig(name="am", url=url)
            assert "abc" not in str(err.value) and "pw" not in str(err.value)
        with pytest.raises(ConfigError, match="headers_env"):
            WebhookConfig(name="am", url="http://h.example/x", headers={"X-Api-Key": "k"})
        with pytest.raises(ConfigError) as err:
            WebhookConfig(name="am", url="htp:/secret-token-in-a-bad-url")
        assert "secret-token" not in str(err.value)

    def test_errors_carry_no_url_path_or_query(self):
        from wtwin.sinks.retry import describe

        text = describe(ValueError("cannot reach https://user:pw@h.example:8443/hook/s3cr3t?x=1 now"))
        assert "s3cr3t" not in text and "pw" not in text and "h.example:8443" in text

    def test_unsigned_without_secret(self):
        """No secret configured: no signature header, still delivered."""
        async def scenario():
            async with Recorder() as hook:
                sink = WebhookSink.build(WebhookConfig(name="am", url=hook.url), {})
                d = Delivery(sinks=[sink], outbox=MemoryOutbox(), policy=FAST)
                await d.start()
                d.submit_nowait(alert())
                await hook.wait_for(1)
                await d.aclose()
                return hook
        hook = asyncio.run(scenario())
        assert "webhook-signature" not in hook.requests[0].headers
        assert hook.requests[0].headers["webhook-id"] == alert().idempotency_key


class TestDelivery:
    def test_retries_on_temporary_error(self):
        """503 then 200: the same message id is retried and verified each time."""
        hook, d, _ = asyncio.run(deliver([Reply(503, "busy"), Reply(200, "")], [alert()], expect=2))
        first, second = hook.requests
        assert first.headers["webhook-id"] == second.headers["webhook-id"]
        assert first.body == second.body
        assert d.counters.values[("am", "retry")] == 1 and d.counters.values[("am", "success")] == 1

    @pytest.mark.parametrize("status", [400, 404, 422, 501])
    def test_fails_on_permanent_error(self, status):
        """Permanent answers are not retried: one attempt, dead letter."""
        hook, d, outbox = asyncio.run(deliver([Reply(status, "no")], [alert()]))
        assert len(hook.requests) == 1
        (row,) = asyncio.run(outbox.dead())
        assert row.attempts == 1 and f"HTTP {status}" in row.last_error

    def test_timeout_is_retried(self):
        """A receiver slower than timeout_s counts as a temporary error."""
        hook, d, _ = asyncio.run(deliver([Reply(200, "", delay_s=1.0), Reply(200, "")], [alert()],
                                         expect=2, timeout_s=0.2))
        assert d.counters.values[("am", "retry")] == 1 and d.counters.values[("am", "success")] == 1

    def test_one_message_per_alert(self):
        """The webhook does not coalesce: one signed message per alert, ids differ."""
        alerts = [alert(run=f"r{i}") for i in range(3)]
        hook, _, _ = asyncio.run(deliver([], alerts, expect=3))
        assert len({r.headers["webhook-id"] for r in hook.requests}) == 3
        assert [r.json()["alerts"][0]["labels"]["run"] for r in hook.requests] == ["r0", "r1", "r2"]

    def test_healthcheck(self):
        """healthcheck GETs healthcheck_url when set: 2xx healthy, errors not."""
        async def scenario():
            async with Recorder([Reply(200), Reply(503)]) as hc:
                cfg = WebhookConfig(name="am", url="http://127.0.0.1:1/x", healthcheck_url=hc.url)
                sink = WebhookSink.build(cfg, {})
                results = [await sink.healthcheck(), await sink.healthcheck()]
                await sink.aclose()
            dead = WebhookSink.build(WebhookConfig(name="am", url="http://x", healthcheck_url=hc.url), {})
            results.append(await dead.healthcheck())
            await dead.aclose()
            return results
        assert asyncio.run(scenario()) == [True, False, False]


class TestConfig:
    def test_exactly_one_url(self):
        """url, url_env, url_file: exactly one."""
        with pytest.raises(ConfigError, match="exactly one of url, url_env, url_file"):
            WebhookConfig(name="am")
        with pytest.raises(ConfigError, match="exactly one"):
            WebhookConfig(name="am", url="http://x", url_env="U")

    def test_reserved_headers_rejected(self):
        """Headers the sink sets itself cannot be configured."""
        with pytest.raises(ConfigError, match="headers.webhook-id"):
            WebhookConfig(name="am", url="http://x", headers={"webhook-id": "x"})

    def test_secret_from_file(self, tmp_path):
        """secret_file is read and stripped; signatures verify with it."""
        f = tmp_path / "secret"
        f.write_text(SECRET + "\n")
        sink = WebhookSink.build(WebhookConfig(name="am", url="http://x", secret_file=str(f)), {})
        body, headers = sink.request([alert()], time.time())
        assert json.loads(body) == Webhook(SECRET).verify(body, headers)

    def test_bad_secret_names_field(self):
        """A secret that is not whsec_<base64> is a config error naming the sink."""
        with pytest.raises(ConfigError, match="sinks.am.secret must be 'whsec_'"):
            WebhookSink.build(WebhookConfig(name="am", url="http://x", secret_env="S"), {"S": "whsec_***"})

    def test_missing_secret_env(self):
        """An unset secret variable names the field and the variable."""
        with pytest.raises(ConfigError, match="sinks.am.secret_env: environment variable S"):
            WebhookSink.build(WebhookConfig(name="am", url="http://x", secret_env="S"), {})


class TestSecretsStayOut:
    """Issue 24: the literal-secret check knows path tokens and X-Api headers, and a
    receiver that echoes the request in its error body does not get the secret stored."""

    @pytest.mark.parametrize("url", ["https://discord.com/api/webhooks/123/abc",
                                     "https://hooks.example.com/in/T0A1B2C3D4E5F6G7H8I9J0",
                                     "https://x.webhook.office.com/webhookb2/abc"])
    def test_path_token_urls_are_refused_as_literals(self, url):
        with pytest.raises(ConfigError, match="url_env or url_file"):
            WebhookConfig(name="am", url=url)

    def test_plain_paths_are_fine(self):
        WebhookConfig(name="am", url="https://alerts.example.com/api/v1/wtwin-alerts")

    def test_x_api_header_is_refused_as_a_literal(self):
        with pytest.raises(ConfigError, match="headers_env"):
            WebhookConfig(name="am", url="http://h.example/x", headers={"X-Api": "k"})

    def test_an_echoed_secret_is_not_stored_in_the_dead_letter(self):
        token = "T0A1B2C3D4E5F6G7H8I9J0"

        async def scenario():
            def echo(req):
                return Reply(400, f"bad request to {req.path} with {req.headers.get('X-Auth', '')}")
            async with Recorder(check=echo) as hook:
                env = {"HOOK_URL": f"{hook.url.rstrip('/')}/in/{token}", "HOOK_AUTH": "sekrit-value-42"}
                config = WebhookConfig(name="am", url_env="HOOK_URL", headers_env={"X-Auth": "HOOK_AUTH"})
                outbox = MemoryOutbox()
                d = Delivery(sinks=[WebhookSink.build(config, env)], outbox=outbox, policy=FAST)
                await d.start()
                d.submit_nowait(alert())
                await hook.wait_for(1)
                await until(lambda: outbox.counts().get(("am", "dead")))
                await d.aclose()
                return hook, await outbox.dead()
        hook, (row,) = asyncio.run(scenario())
        assert token in hook.requests[0].path                     # the receiver did see it
        assert "HTTP 400" in row.last_error and "[redacted]" in row.last_error
        assert token not in row.last_error and "sekrit-value-42" not in row.last_error
