"""Resumes: a run that goes back to a checkpoint and repeats steps is not a failure.

Each test drives a real `RunMonitor`: a run crashes at step 7000 and resumes from its
step-5000 checkpoint, so steps 5001..7000 come again with the losses they had.
"""

from __future__ import annotations

import re

import pytest

import lr_curves

from wtwin.detect import RunMonitor
from wtwin.detect import rewind

N, CRASH, CHECKPOINT = 12000, 7000, 5000
RESUMED = list(range(1, CRASH + 1)) + list(range(CHECKPOINT + 1, N + 1))


def pages(states):
    return [(s.step, f.kind) for s in states for f in s.findings
            if f.active and f.severity in ("warning", "critical")]


def feed(mon, steps, loss, eta=None):
    return [mon.update_loss(t, float(loss[t - 1]), None if eta is None else float(eta[t - 1]))
            for t in steps]


def resume_findings(states):
    return [f for s in states for f in s.findings if f.kind == "resume_jump" and f.active]


@pytest.mark.parametrize("kind", ["cosine", "wsd", "step"])
@pytest.mark.parametrize("law,send_lr", [("auto", True), ("mpl", True), ("auto", False)])
def test_repeated_steps_are_silent(kind, law, send_lr):
    """The repeated steps raise no page, whichever law and schedule (before rewind points,
    the forecast's learning-rate sums ran ahead and paged drift ~800 steps later; the
    rise and spike levels paged at once on the higher checkpoint loss)."""
    truth = "mpl" if law == "mpl" else "tissue"
    eta, _, noisy = lr_curves.curve(truth, kind, N, noise=0.02, seed=1)
    mon = RunMonitor("pretraining", law=law)
    states = feed(mon, RESUMED, noisy, eta if send_lr else None)
    assert pages(states) == []
    (f,) = resume_findings(states)
    assert f.step == CHECKPOINT + 1 and f.severity == "info"
    at = int(re.search(r"rewound to step (\d+)", f.message).group(1))
    assert CHECKPOINT - rewind.RATIO * CHECKPOINT - rewind.MIN_GAP <= at <= CHECKPOINT


def test_rewind_is_exact():
    """After the resume the detectors are exactly those of a run that stopped at the
    rewind point and went on at the resumed step: same forecast, scores and alarms
    (`resume_jump` aside, which saw the resume)."""
    eta, _, noisy = lr_curves.curve("tissue", "cosine", N, noise=0.02, seed=2)
    a = RunMonitor("pretraining")
    sa = feed(a, RESUMED, noisy, eta)
    (f,) = resume_findings(sa)
    at = int(re.search(r"rewound to step (\d+)", f.message).group(1))
    b = RunMonitor("pretraining")
    feed(b, range(1, at + 1), noisy, eta)
    sb = feed(b, range(CHECKPOINT + 1, N + 1), noisy, eta)
    tail = sa[CRASH:]
    assert len(tail) == len(sb)
    for x, y in zip(tail, sb):
        assert x._replace(findings=()) == y._replace(findings=())
        assert [g for g in x.findings if g.kind != "resume_jump"] == list(y.findings)
    da, db = a.snapshot()["detectors"], b.snapshot()["detectors"]
    ra, rb = da.pop("resume_jump"), db.pop("resume_jump")
    assert da == db
    # the one difference: the resume's own jump does not enter resume_jump's change scale
    assert ra["_last_step"] == rb["_last_step"] and ra["_last_loss"] == rb["_last_loss"]


def test_resume_to_a_higher_loss_warns():
    """A checkpoint that comes back well above the loss the run had there (a broken
    restore) is a resume_jump warning."""
    eta, clean, noisy = lr_curves.curve("tissue", "wsd", N, noise=0.02, seed=3)
    mon = RunMonitor("pretraining")
    feed(mon, range(1, CRASH + 1), noisy, eta)
    st = mon.update_loss(CHECKPOINT + 1, float(clean[CHECKPOINT]) + 0.5, float(eta[CHECKPOINT]))
    (f,) = resume_findings([st])
    assert f.severity == "warning" and "rewound to step" in f.message


def test_drift_after_a_resume_is_caught():
    """Rewinding does not blind the monitor: a ramp after the resume is a drift."""
    eta, _, noisy = lr_curves.curve("tissue", "wsd", N, noise=0.02, seed=4)
    ramp = noisy.copy()
    ramp[7999:] += 2e-4 * (lr_curves.np.arange(N - 7999))   # +0.2 over 1000 steps
    mon = RunMonitor("pretraining")
    states = feed(mon, RESUMED, ramp, eta)
    got = pages(states)
    assert got and got[0][1] in ("drift", "plateau") and 8000 < got[0][0] < 9500


def test_resume_before_any_point_starts_over():
    """Back to a step before the first rewind point: fresh detectors, no page."""
    eta, _, noisy = lr_curves.curve("tissue", "cosine", 6000, noise=0.02, seed=5)
    mon = RunMonitor("pretraining")
    back = rewind.MIN_GAP // 2
    states = feed(mon, list(range(1, 4001)) + list(range(back, 6001)), noisy, eta)
    assert pages(states) == []
    (f,) = resume_findings(states)
    assert "started over" in f.message


def test_restored_monitor_resume_starts_over():
    """Rewind points are not persisted: a monitor restored from its snapshot (a daemon
    restart) meets a resume with fresh detectors, and stays silent."""
    eta, _, noisy = lr_curves.curve("tissue", "wsd", N, noise=0.02, seed=6)
    mon = RunMonitor("pretraining")
    feed(mon, range(1, CRASH + 1), noisy, eta)
    back = RunMonitor("pretraining")
    back.restore(mon.snapshot())
    states = feed(back, range(CHECKPOINT + 1, N + 1), noisy, eta)
    assert pages(states) == []
    assert "started over" in resume_findings(states)[0].message


def test_points_are_bounded_and_spaced():
    """At most KEEP points, spaced by RATIO x step: a bounded cost at any run length."""
    pts = rewind.RewindPoints()
    mon = RunMonitor("pretraining")
    taken = []
    for t in range(1, 200_001, 7):
        mon.update_loss(t, 2.6 + 9.0 * t ** -0.35)
        if t >= pts.next_at:
            pts.take(t, mon.detectors)
            taken.append(t)
    assert len(pts) == rewind.KEEP
    assert len(taken) < 40
    assert all(b - a >= max(rewind.MIN_GAP, rewind.RATIO * a) for a, b in zip(taken, taken[1:]))
    assert pts.before(taken[-3] + 1)[0] == taken[-3] and len(pts) == rewind.KEEP - 2
    assert len(mon._points) <= rewind.KEEP
