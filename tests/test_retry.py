"""The one retry policy: classification, full-jitter backoff, Retry-After, dead letter."""

from __future__ import annotations

import asyncio
import random
from email.utils import formatdate

import aiohttp
import pytest

from wtwin.sinks.errors import ConfigError, SinkError
from wtwin.sinks.retry import DISABLE, PERMANENT, RETRY, RetryPolicy, classify, classify_status, parse_retry_after


class TestClassify:
    @pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
    def test_retriable_statuses(self, status):
        """408, 429 and 5xx other than 501 are retried."""
        assert classify_status(status) == RETRY

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 413, 422, 501, 301])
    def test_permanent_statuses(self, status):
        """Other 4xx, 501 and redirects are permanent."""
        assert classify_status(status) == PERMANENT

    @pytest.mark.parametrize("status", [200, 201, 202, 204])
    def test_success(self, status):
        """2xx is success."""
        assert classify_status(status) is None

    def test_transport_errors_retry(self):
        """Connection errors and timeouts are retried."""
        assert classify(aiohttp.ClientConnectionError("refused")) == RETRY
        assert classify(asyncio.TimeoutError()) == RETRY
        assert classify(ConnectionRefusedError()) == RETRY

    def test_disable_and_unexpected(self):
        """A sink's disable verdict wins; unexpected exceptions are permanent."""
        assert classify(SinkError("gone", status=404, disable=True)) == DISABLE
        assert classify(KeyError("bug")) == PERMANENT


class TestBackoff:
    def test_full_jitter_within_caps(self):
        """Delays are uniform in [0, min(cap, base*2^(n-1))]."""
        p = RetryPolicy(max_attempts=20, base_s=0.1, cap_s=2.0)
        rng = random.Random(1)
        for n in range(1, 20):
            ceiling = min(2.0, 0.1 * 2 ** (n - 1))
            delays = [p.backoff(n, rng) for _ in range(200)]
            assert all(0 <= d <= ceiling for d in delays)
            assert max(delays) > 0.8 * ceiling  # it really jitters across the range

    def test_huge_attempt_count_does_not_overflow(self):
        """An absurd attempt count still gives a delay under the cap."""
        assert RetryPolicy(max_attempts=10**6).backoff(10**6) <= 300.0

    def test_retry_after_honoured_and_capped(self):
        """A server's Retry-After replaces the backoff, capped at max_retry_after_s."""
        p = RetryPolicy(max_retry_after_s=30.0)
        assert p.decide(1, SinkError("slow", status=429, retry_after=12.0)).delay == 12.0
        assert p.decide(1, SinkError("slow", status=429, retry_after=3600.0)).delay == 30.0

    def test_dead_after_last_attempt(self):
        """The last allowed attempt failing dead-letters; earlier ones retry."""
        p = RetryPolicy(max_attempts=3)
        err = SinkError("busy", status=503)
        assert [p.decide(n, err).action for n in (1, 2, 3)] == ["retry", "retry", "dead"]

    def test_permanent_is_dead_at_once(self):
        """A permanent error is never retried."""
        assert RetryPolicy().decide(1, SinkError("bad", status=400)).action == "dead"

    def test_disable(self):
        """A disabling error yields the disable decision."""
        assert RetryPolicy().decide(1, SinkError("gone", status=410, disable=True)).action == "disable"


class TestRetryAfter:
    def test_delta_seconds(self):
        """Integer and decimal seconds."""
        assert parse_retry_after("7", 0.0) == 7.0
        assert parse_retry_after(" 0.5 ", 0.0) == 0.5

    def test_http_date(self):
        """An HTTP date counts from now."""
        assert parse_retry_after(formatdate(1_000_030, usegmt=True), 1_000_000.0) == pytest.approx(30.0)

    def test_garbage_and_absent(self):
        """Unparseable or absent headers give None."""
        assert parse_retry_after("soon", 0.0) is None
        assert parse_retry_after(None, 0.0) is None


class TestPolicyConfig:
    @pytest.mark.parametrize("kwargs, field", [
        ({"max_attempts": 0}, "max_attempts"),
        ({"base_s": 0}, "base_s"),
        ({"cap_s": -1}, "cap_s"),
        ({"base_s": 10.0, "cap_s": 1.0}, "cap_s"),
    ])
    def test_rejects_bad_values_naming_the_field(self, kwargs, field):
        """Construction validates and names the field."""
        with pytest.raises(ConfigError, match=field):
            RetryPolicy(**kwargs)


def test_module_doctests():
    """The seeded examples in the sinks modules' docstrings (and the test recorder's) hold."""
    import doctest

    import http_recorder
    from wtwin.sinks import retry, routing

    for mod in (retry, routing, http_recorder):
        result = doctest.testmod(mod)
        assert result.failed == 0 and result.attempted > 0, mod.__name__
