"""Routing: match by kind/severity/run glob, for_s holds, resolved pairing (in both outboxes)."""

from __future__ import annotations

import asyncio

import pytest

from wtwin.detect.alert import Alert
from wtwin.sinks.errors import ConfigError
from wtwin.sinks.memory_outbox import MemoryOutbox
from wtwin.sinks.routing import RouteConfig, Router


def alert(run="gpt-7b", kind="drift", severity="warning", status="firing", started_at=0.0):
    return Alert(run=run, kind=kind, severity=severity, status=status, step=1, started_at=started_at)


def sinks_of(plan):
    return [tuple(plan.due)] if plan.due else []


def commit(box, a, now):
    """Route-independent: stage one plan on ``box`` and commit it; the rows written."""
    return asyncio.run(_commit(box, a, now))


async def _commit(box, plan, now):
    try:
        return (await box.commit(box.stage([plan], now)))[0]
    except Exception as err:
        return err


class TestMatching:
    def test_default_routes_everything_everywhere(self):
        """No routes: every warning and critical alert goes to every sink."""
        r = Router([], ["log", "slack"])
        assert sinks_of(r.route(alert(), 0.0)) == [("log", "slack")]
        assert sinks_of(r.route(alert(severity="critical"), 0.0)) == [("log", "slack")]

    def test_info_goes_nowhere_by_default(self):
        """No routes, or a route that names no severities: an info alert, firing or
        resolved, goes to no sink."""
        for r in (Router([], ["log", "slack"]), Router([RouteConfig(sinks=("slack",))], ["slack"])):
            assert sinks_of(r.route(alert(severity="info"), 0.0)) == []
            assert sinks_of(r.route(alert(severity="info", status="resolved"), 0.0)) == []

    def test_info_where_a_route_asks_for_it(self):
        """A route that names info gets info; the others still do not."""
        r = Router([RouteConfig(sinks=("quiet",), severities=("info",)), RouteConfig(sinks=("slack",))],
                   ["quiet", "slack"])
        assert sinks_of(r.route(alert(severity="info"), 0.0)) == [("quiet",)]
        assert sinks_of(r.route(alert(severity="warning"), 0.0)) == [("slack",)]

    def test_empty_severities_refused(self):
        """severities = [] says nothing would match: refused, naming the way out."""
        with pytest.raises(ConfigError, match="routes.severities must name at least one"):
            RouteConfig(sinks=("s",), severities=())

    def test_first_match_wins(self):
        """Routes are tried in order; the first match stops."""
        r = Router([RouteConfig(sinks=("pager",), severities=("critical",)), RouteConfig(sinks=("slack",))],
                   ["pager", "slack"])
        assert sinks_of(r.route(alert(kind="nonfinite", severity="critical"), 0.0)) == [("pager",)]
        assert sinks_of(r.route(alert(kind="drift"), 0.0)) == [("slack",)]

    def test_continue_matching(self):
        """continue_matching lets later routes add their sinks."""
        r = Router([RouteConfig(sinks=("log",), continue_matching=True), RouteConfig(sinks=("slack",))],
                   ["log", "slack"])
        assert sinks_of(r.route(alert(), 0.0)) == [("log", "slack")]

    def test_kind_and_run_glob(self):
        """kinds and the run glob must both match; unmatched alerts go nowhere."""
        r = Router([RouteConfig(sinks=("s",), kinds=("drift", "plateau"), runs="prod-*")], ["s"])
        assert sinks_of(r.route(alert(run="prod-a"), 0.0)) == [("s",)]
        assert sinks_of(r.route(alert(run="dev-a"), 0.0)) == []
        assert sinks_of(r.route(alert(run="prod-b", kind="spike"), 0.0)) == []

    def test_hold_runs_from_the_episode_start(self):
        """for_s makes the firing's rows due at started_at + for_s; an upgrade keeps that end."""
        r = Router([RouteConfig(sinks=("s",), for_s=30.0), RouteConfig(sinks=("now",), continue_matching=True)],
                   ["s", "now"])
        assert dict(r.route(alert(started_at=5.0), 6.0).due) == {"s": 35.0}
        assert dict(r.route(alert(severity="critical", started_at=5.0), 20.0).due) == {"s": 35.0}
        assert dict(r.route(alert(started_at=5.0), 50.0).due) == {"s": 50.0}

    def test_router_keeps_no_state(self):
        """The same alert routed twice gives the same plan: dedup is the policy's."""
        r = Router([RouteConfig(sinks=("s",))], ["s"])
        assert r.route(alert(), 1.0) == r.route(alert(), 1.0)


def outboxes():
    from wtwin.daemon.store.deliveries import SqliteOutbox

    return [("memory", lambda tmp: MemoryOutbox()), ("sqlite", lambda tmp: SqliteOutbox(tmp / "o.db"))]


@pytest.fixture(params=[n for n, _ in outboxes()])
def box(request, tmp_path):
    b = dict(outboxes())[request.param](tmp_path)
    yield b
    asyncio.run(b.aclose())


class TestLifecycle:
    """Routing plans written by each outbox: pairing and holds live in the committed rows."""

    def test_resolved_follows_firing(self, box):
        """A resolved alert goes where its firing went; an orphan resolved goes nowhere."""
        r = Router([RouteConfig(sinks=("s",))], ["s"])
        assert commit(box, r.route(alert(status="resolved", started_at=9.0), 0.0), 0.0) == []
        commit(box, r.route(alert(), 0.0), 0.0)
        assert [x.sink for x in commit(box, r.route(alert(status="resolved"), 1.0), 1.0)] == ["s"]

    def test_repeat_firing_adds_no_row(self, box):
        """The same firing committed twice is one row (idempotency key)."""
        r = Router([RouteConfig(sinks=("s",))], ["s"])
        (first,) = commit(box, r.route(alert(severity="critical"), 0.0), 0.0)
        (again,) = commit(box, r.route(alert(severity="critical"), 1.0), 1.0)
        assert again.id == first.id and box.counts() == {("s", "pending"): 1}

    def test_resolved_reaches_every_route_its_firing_took(self, box):
        """Upgraded to a route of its own, the resolve still reaches the first route too."""
        r = Router([RouteConfig(sinks=("pager",), severities=("critical",)), RouteConfig(sinks=("slack",))],
                   ["pager", "slack"])
        assert [x.sink for x in commit(box, r.route(alert(severity="warning"), 0.0), 0.0)] == ["slack"]
        assert [x.sink for x in commit(box, r.route(alert(severity="critical"), 1.0), 1.0)] == ["pager"]
        resolved = commit(box, r.route(alert(severity="critical", status="resolved"), 2.0), 2.0)
        assert sorted(x.sink for x in resolved) == ["pager", "slack"]

    def test_resolve_goes_only_where_a_firing_went(self, box):
        """Fired at critical straight away (pager only): the resolve does not reach slack."""
        r = Router([RouteConfig(sinks=("pager",), severities=("critical",)), RouteConfig(sinks=("slack",))],
                   ["pager", "slack"])
        commit(box, r.route(alert(severity="critical"), 0.0), 0.0)
        resolved = commit(box, r.route(alert(severity="critical", status="resolved"), 2.0), 2.0)
        assert [x.sink for x in resolved] == ["pager"]

    def test_for_holds_then_releases(self, box):
        """for_s: the row is committed at once, due when the hold ends; resolved after, it follows."""
        r = Router([RouteConfig(sinks=("s",), for_s=30.0)], ["s"])
        commit(box, r.route(alert(), 0.0), 0.0)
        assert asyncio.run(box.next_due("s")) == 30.0 and asyncio.run(box.due("s", 29.9, 10)) == []
        (held,) = asyncio.run(box.due("s", 30.0, 10))
        asyncio.run(box.record(held.id, state="delivered", attempts=1, next_attempt_at=30.0, error="", now=31.0))
        assert [x.sink for x in commit(box, r.route(alert(status="resolved"), 40.0), 40.0)] == ["s"]

    def test_resolved_within_for_sends_nothing(self, box):
        """A flap shorter than for_s is never sent: the held row is cancelled, no resolve row."""
        r = Router([RouteConfig(sinks=("s",), for_s=30.0)], ["s"])
        commit(box, r.route(alert(), 0.0), 0.0)
        assert commit(box, r.route(alert(status="resolved"), 10.0), 10.0) == []
        assert asyncio.run(box.due("s", 100.0, 10)) == [] and box.counts() == {}

    def test_upgrade_during_hold_replaces_the_held_row(self, box):
        """warning held, then critical: one row (the critical one), due when the hold ends."""
        r = Router([RouteConfig(sinks=("s",), for_s=30.0)], ["s"])
        commit(box, r.route(alert(), 0.0), 0.0)
        commit(box, r.route(alert(severity="critical"), 10.0), 10.0)
        (row,) = asyncio.run(box.due("s", 30.0, 10))
        assert row.alert.severity == "critical" and row.next_attempt_at == 30.0

    def test_hold_survives_a_restart(self, tmp_path):
        """The held row is on disk: a reopened outbox sends it when due, and the resolve
        within the hold still cancels it."""
        from wtwin.daemon.store.deliveries import SqliteOutbox

        r = Router([RouteConfig(sinks=("s",), for_s=30.0)], ["s"])
        box = SqliteOutbox(tmp_path / "o.db")
        commit(box, r.route(alert(), 0.0), 0.0)
        asyncio.run(box.aclose())
        box = SqliteOutbox(tmp_path / "o.db")
        assert asyncio.run(box.next_due("s")) == 30.0
        assert commit(box, r.route(alert(status="resolved"), 10.0), 10.0) == []
        assert box.counts() == {}
        asyncio.run(box.aclose())


class TestRouteConfig:
    @pytest.mark.parametrize("kwargs, field", [
        ({"sinks": ()}, "sinks"), ({"sinks": "slack"}, "sinks"),
        ({"sinks": ("s",), "kinds": ("bogus",)}, "kinds"),
        ({"sinks": ("s",), "severities": ("page",)}, "severities"),
        ({"sinks": ("s",), "for_s": -1}, "for_s"), ({"sinks": ("s",), "for_s": "1m"}, "for_s"),
        ({"sinks": ("s",), "runs": ""}, "runs"),
    ])
    def test_validation_names_field(self, kwargs, field):
        """Bad route values are rejected naming the field."""
        with pytest.raises(ConfigError, match=f"routes.{field}"):
            RouteConfig(**kwargs)

    def test_lists_become_tuples(self):
        """TOML lists are accepted and frozen as tuples."""
        assert RouteConfig(sinks=["a"], kinds=["drift"]).kinds == ("drift",)

    def test_cooldown_is_the_policys(self):
        """Routes have no cooldown_s any more (detection.cooldown_s owns it)."""
        with pytest.raises(TypeError):
            RouteConfig(sinks=("s",), cooldown_s=60.0)


def test_a_resolve_staged_before_the_hold_ended_does_not_cancel_a_firing_in_flight(tmp_path):
    """The resolve was staged 0.1 s into a 0.3 s hold, but its transaction ran after the
    hold ended and a worker had taken the firing: held is judged when the transaction
    runs, so the firing is not cancelled under the worker (its outcome is recorded) and
    the resolve follows it."""
    import time

    from wtwin.daemon.store.deliveries import SqliteOutbox

    async def scenario():
        box = SqliteOutbox(tmp_path / "o.db")
        t0 = time.time()
        r = Router([RouteConfig(sinks=("s",), for_s=0.3)], ["s"])
        await _commit(box, r.route(alert(started_at=t0), t0), t0)
        now = t0 + 0.1
        staged = box.stage([r.route(alert(status="resolved", started_at=t0), now)], now)
        await asyncio.sleep(0.4)
        (taken,) = await box.due("s", time.time(), 10)          # a worker takes the firing
        (resolved,) = await box.commit(staged)                  # then the resolve commits
        await box.record(taken.id, state="delivered", attempts=1, next_attempt_at=0.0, error="",
                         now=time.time())
        await box.aclose()
        return taken, resolved

    taken, resolved = asyncio.run(scenario())
    assert taken.alert.status == "firing"
    assert [(x.sink, x.alert.status) for x in resolved] == [("s", "resolved")]
