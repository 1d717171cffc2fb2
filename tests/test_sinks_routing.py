"""Routing: match by kind/severity/run glob, for_s holds, cooldowns, resolved pairing."""

from __future__ import annotations

import pytest

from wtwin.detect.alert import Alert
from wtwin.sinks.errors import ConfigError
from wtwin.sinks.routing import RouteConfig, Router


def alert(run="gpt-7b", kind="drift", severity="warning", status="firing", started_at=0.0):
    return Alert(run=run, kind=kind, severity=severity, status=status, step=1, started_at=started_at)


def sinks_of(out):
    return [s for _, s in out]


class TestMatching:
    def test_default_routes_everything_everywhere(self):
        """No routes: every alert goes to every sink."""
        r = Router([], ["log", "slack"])
        assert sinks_of(r.offer(alert(), 0.0)) == [("log", "slack")]

    def test_first_match_wins(self):
        """Routes are tried in order; the first match stops."""
        r = Router([RouteConfig(sinks=("pager",), severities=("critical",)), RouteConfig(sinks=("slack",))],
                   ["pager", "slack"])
        assert sinks_of(r.offer(alert(kind="nonfinite", severity="critical"), 0.0)) == [("pager",)]
        assert sinks_of(r.offer(alert(kind="drift"), 0.0)) == [("slack",)]

    def test_continue_matching(self):
        """continue_matching lets later routes add their sinks."""
        r = Router([RouteConfig(sinks=("log",), continue_matching=True), RouteConfig(sinks=("slack",))],
                   ["log", "slack"])
        assert sinks_of(r.offer(alert(), 0.0)) == [("log", "slack")]

    def test_kind_and_run_glob(self):
        """kinds and the run glob must both match; unmatched alerts go nowhere."""
        r = Router([RouteConfig(sinks=("s",), kinds=("drift", "plateau"), runs="prod-*")], ["s"])
        assert sinks_of(r.offer(alert(run="prod-a"), 0.0)) == [("s",)]
        assert r.offer(alert(run="dev-a"), 0.0) == []
        assert r.offer(alert(run="prod-b", kind="spike"), 0.0) == []


class TestLifecycle:
    def test_resolved_follows_firing(self):
        """A resolved alert goes where its firing went; an orphan resolved goes nowhere."""
        r = Router([RouteConfig(sinks=("s",))], ["s"])
        assert r.offer(alert(status="resolved"), 0.0) == []
        r.offer(alert(), 0.0)
        assert sinks_of(r.offer(alert(status="resolved"), 1.0)) == [("s",)]

    def test_repeat_firing_deduplicated(self):
        """A second firing for a (run, kind) already firing adds nothing."""
        r = Router([RouteConfig(sinks=("s",))], ["s"])
        r.offer(alert(severity="critical"), 0.0)
        assert r.offer(alert(severity="critical"), 1.0) == []
        assert r.offer(alert(severity="warning"), 1.0) == []

    def test_severity_upgrade_sent_again(self):
        """warning -> critical for the same (run, kind) goes out again."""
        r = Router([RouteConfig(sinks=("s",))], ["s"])
        r.offer(alert(severity="warning"), 0.0)
        assert [a.severity for a, _ in r.offer(alert(severity="critical"), 1.0)] == ["critical"]

    def test_resolved_reaches_every_route_its_firing_took(self):
        """Upgraded to a route of its own, the resolve still reaches the first route too."""
        r = Router([RouteConfig(sinks=("pager",), severities=("critical",)), RouteConfig(sinks=("slack",))],
                   ["pager", "slack"])
        assert sinks_of(r.offer(alert(severity="warning"), 0.0)) == [("slack",)]
        assert sinks_of(r.offer(alert(severity="critical"), 1.0)) == [("pager",)]
        assert sinks_of(r.offer(alert(severity="critical", status="resolved"), 2.0)) == [("pager", "slack")]

    def test_for_holds_then_releases(self):
        """for_s: held, released by due() once the time has passed."""
        r = Router([RouteConfig(sinks=("s",), for_s=30.0)], ["s"])
        assert r.offer(alert(), 0.0) == [] and r.next_due() == 30.0
        assert r.due(29.9) == []
        assert sinks_of(r.due(30.0)) == [("s",)]
        assert r.next_due() is None
        assert sinks_of(r.offer(alert(status="resolved"), 40.0)) == [("s",)]

    def test_resolved_within_for_sends_nothing(self):
        """A flap shorter than for_s is never sent, neither firing nor resolved."""
        r = Router([RouteConfig(sinks=("s",), for_s=30.0)], ["s"])
        r.offer(alert(), 0.0)
        assert r.offer(alert(status="resolved"), 10.0) == []
        assert r.due(100.0) == []

    def test_cooldown_suppresses_refire(self):
        """Within cooldown_s of a sent firing, a new firing (and its resolve) is suppressed."""
        r = Router([RouteConfig(sinks=("s",), cooldown_s=60.0)], ["s"])
        r.offer(alert(started_at=0.0), 0.0)
        r.offer(alert(status="resolved", started_at=0.0), 5.0)
        assert r.offer(alert(started_at=10.0), 10.0) == []
        assert r.offer(alert(status="resolved", started_at=10.0), 20.0) == []
        assert r.suppressed == 1
        assert sinks_of(r.offer(alert(started_at=70.0), 70.0)) == [("s",)]

    def test_cooldown_is_per_run_and_kind(self):
        """Another run or kind is not affected by a cooldown."""
        r = Router([RouteConfig(sinks=("s",), cooldown_s=60.0)], ["s"])
        r.offer(alert(), 0.0)
        r.offer(alert(status="resolved"), 1.0)
        assert sinks_of(r.offer(alert(run="other"), 2.0)) == [("s",)]
        assert sinks_of(r.offer(alert(kind="spike"), 2.0)) == [("s",)]


class TestRouteConfig:
    @pytest.mark.parametrize("kwargs, field", [
        ({"sinks": ()}, "sinks"), ({"sinks": "slack"}, "sinks"),
        ({"sinks": ("s",), "kinds": ("bogus",)}, "kinds"),
        ({"sinks": ("s",), "severities": ("page",)}, "severities"),
        ({"sinks": ("s",), "for_s": -1}, "for_s"), ({"sinks": ("s",), "cooldown_s": "1m"}, "cooldown_s"),
        ({"sinks": ("s",), "runs": ""}, "runs"),
    ])
    def test_validation_names_field(self, kwargs, field):
        """Bad route values are rejected naming the field."""
        with pytest.raises(ConfigError, match=f"routes.{field}"):
            RouteConfig(**kwargs)

    def test_lists_become_tuples(self):
        """TOML lists are accepted and frozen as tuples."""
        assert RouteConfig(sinks=["a"], kinds=["drift"]).kinds == ("drift",)
