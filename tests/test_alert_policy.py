"""AlertPolicy: findings -> firing/resolved transitions, deduplicated, held, cooled down."""

import pytest

from wtwin.detect.policy import AlertPolicy
from wtwin.detect import Finding


def F(kind, active, step, severity="warning"):
    return Finding(kind, severity, active, step, f"{kind} at {step}")


def _in_cooldown(kind):
    """A policy (cooldown 60 s) whose ``kind`` fired at 0.0 and resolved at 1.0."""
    p = AlertPolicy("r", cooldown_s=60, resolve_after_steps=0)
    p.apply(F(kind, True, 1), 0.0)
    p.apply(F(kind, False, 2), 1.0)
    return p


class TestAlertPolicy:
    def test_fires_once_while_active(self):
        p = AlertPolicy("r", resolve_after_steps=0)
        out = [p.apply(F("drift", True, s), now=s) for s in range(10)]
        assert [a.status for a in out if a] == ["firing"]

    def test_severity_upgrade_is_a_new_transition_with_a_new_key(self):
        p = AlertPolicy("r")
        a = p.apply(F("drift", True, 1), 1.0)
        b = p.apply(F("drift", True, 2, "critical"), 2.0)
        assert b.severity == "critical" and b.started_at == a.started_at
        assert b.idempotency_key != a.idempotency_key

    def test_resolve_waits_for_a_quiet_streak_of_steps(self):
        p = AlertPolicy("r", resolve_after_steps=50)
        p.apply(F("drift", True, 100), 0.0)
        assert p.apply(F("drift", False, 110), 1.0) is None          # hovering: held
        assert p.apply(F("drift", True, 120), 2.0) is None           # back on: no re-page
        assert p.apply(F("drift", False, 130), 3.0) is None
        resolved = p.apply(F("drift", False, 180), 4.0) or p.advance(180, 4.0)[0]
        assert resolved.status == "resolved" and resolved.ended_at == 4.0

    def test_idle_while_nothing_is_held(self):
        """``idle``: nothing for ``advance`` to do (the daemon skips the policy on an update
        without findings then); a held resolve and a firing held by a cooldown are work."""
        p = AlertPolicy("r", cooldown_s=60, resolve_after_steps=50)
        assert p.idle
        p.apply(F("drift", True, 100), 0.0)
        assert p.idle                                        # firing, nothing held
        p.apply(F("drift", False, 110), 1.0)
        assert not p.idle                                    # a resolve held for 50 steps
        assert p.advance(159, 2.0) == [] and not p.idle
        assert p.advance(160, 3.0)[0].status == "resolved" and p.idle
        assert p.apply(F("drift", True, 170), 10.0) is None  # inside the cooldown: held
        assert not p.idle
        assert p.advance(180, 64.0)[0].status == "firing" and p.idle
        restored = AlertPolicy("r")
        restored.restore(p.snapshot())
        assert restored.idle

    def test_stalled_resolves_at_once(self):
        p = AlertPolicy("r", resolve_after_steps=50)
        p.apply(F("stalled", True, 7), 0.0)
        assert p.apply(F("stalled", False, 7), 1.0).status == "resolved"

    def test_cooldown_delays_refiring(self):
        p = _in_cooldown("spike")
        assert p.apply(F("spike", True, 3), 30.0) is None
        assert p.delayed == 1
        assert p.apply(F("spike", True, 4), 62.0).status == "firing"

    def test_cooldown_never_swallows_an_episode(self):
        """Detectors report a kind only when it changes: a firing held by the cooldown fires
        once it has passed, at the next loss event (``advance``), with no new finding."""
        p = _in_cooldown("drift")
        assert p.apply(F("drift", True, 800), 20.0) is None
        assert p.advance(810, 40.0) == []
        (late,) = p.advance(820, 61.5)
        assert late.status == "firing" and late.step == 800 and late.kind == "drift"

    def test_a_held_firing_fires_when_the_run_ends_and_stays_firing(self):
        """The run ends inside the cooldown while the condition holds: the held firing is
        sent, and not resolved in the same breath (the run did not recover)."""
        p = _in_cooldown("drift")
        assert p.apply(F("drift", True, 3), 5.0) is None
        out = p.resolve_all(4, 6.0, "run ended")
        assert [(a.kind, a.status, a.step, a.started_at) for a in out] == [("drift", "firing", 3, 6.0)]
        assert set(p.firing) == {"drift"}

    def test_a_held_firing_whose_condition_ended_is_withdrawn(self):
        """An episode that begins and recovers inside the cooldown is not sent, at the
        cooldown's end or at the run's: it is counted in ``withdrawn``."""
        p = _in_cooldown("drift")
        assert p.apply(F("drift", True, 3), 5.0) is None
        assert p.apply(F("drift", False, 9), 8.0) is None
        assert p.advance(20, 70.0) == [] and p.resolve_all(21, 71.0, "run ended") == []
        assert (p.delayed, p.withdrawn, p.firing) == (1, 1, {})

    def test_a_held_firing_goes_out_when_the_cooldown_ends(self):
        p = _in_cooldown("spike")
        assert p.apply(F("spike", True, 3), 5.0) is None
        assert p.advance(4, 60.9) == []
        (a,) = p.advance(5, 61.0)
        assert (a.status, a.step, a.started_at) == ("firing", 3, 61.0)

    def test_cooldown_never_delays_an_escalation(self):
        p = AlertPolicy("r", cooldown_s=60, resolve_after_steps=0)
        p.apply(F("divergence", True, 1), 0.0)
        p.apply(F("divergence", False, 2), 1.0)
        a = p.apply(F("divergence", True, 3, "critical"), 2.0)
        assert a is not None and a.severity == "critical"

    def test_run_end_resolves_only_what_recovered(self):
        """At run end a kind whose resolve is held (its condition ended) resolves, and so
        does ``stalled``; what still holds stays firing, warning or critical."""
        p = AlertPolicy("r", resolve_after_steps=1000)
        p.apply(F("drift", True, 1), 0.0)
        p.apply(F("spike", True, 1), 0.0)
        p.apply(F("stalled", True, 1), 0.0)
        p.apply(F("nonfinite", True, 2, "critical"), 0.0)
        p.apply(F("spike", False, 2), 0.5)
        out = p.resolve_all(3, 1.0, "run ended")
        assert sorted((a.kind, a.status, a.message) for a in out) == [
            ("spike", "resolved", "spike at 2"), ("stalled", "resolved", "run ended")]
        assert set(p.firing) == {"drift", "nonfinite"} and p.idle

    def test_snapshot_round_trips(self):
        p = AlertPolicy("r", resolve_after_steps=50)
        p.apply(F("drift", True, 1), 0.0)
        p.apply(F("drift", False, 10), 1.0)
        q = AlertPolicy("r", resolve_after_steps=50)
        q.restore(p.snapshot())
        assert q.snapshot() == p.snapshot()
        assert q.apply(F("drift", False, 60), 2.0).status == "resolved"

    def test_bad_arguments_are_named(self):
        with pytest.raises(ValueError, match="resolve_after_steps"):
            AlertPolicy("r", resolve_after_steps=-1)


class TestHeldResolveComesDue:
    def test_a_single_inactive_finding_resolves_once_enough_steps_pass(self):
        p = AlertPolicy("r", resolve_after_steps=50)
        p.apply(F("drift", True, 100), 0.0)
        assert p.apply(F("drift", False, 120), 1.0) is None   # reported once, on change
        assert p.advance(150, 2.0) == []
        (resolved,) = p.advance(170, 3.0)
        assert resolved.status == "resolved" and resolved.step == 170
        assert p.firing == {} and p.advance(500, 4.0) == []

    def test_refiring_during_the_hold_cancels_it(self):
        p = AlertPolicy("r", resolve_after_steps=50)
        p.apply(F("drift", True, 100), 0.0)
        p.apply(F("drift", False, 120), 1.0)
        assert p.apply(F("drift", True, 130), 2.0) is None
        assert p.advance(400, 3.0) == [] and "drift" in p.firing
