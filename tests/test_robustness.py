"""Every clean real log stays silent however it arrives: scaled x0.01 and x100, offset by
+1000, logged every 10th step, every step twice, with a 20% gap, and resumed from a
checkpoint (the shipped defaults, through the one detection library)."""

import pytest

from corpus import TRANSFORMS, entries, require_data, transform

from wtwin.detect.replay import alerts

QUIET = [e for e in entries(own=False) if e.label != "anomalous"]


@pytest.fixture(scope="module", autouse=True)
def _data():
    require_data()


def _events(e):
    from wtwin.daemon.logs import read_log
    return list(read_log(e.path).events())


@pytest.mark.parametrize("e", QUIET, ids=[e.name for e in QUIET])
def test_clean_log_stays_silent_under_every_transform(e):
    events = _events(e)
    paged = {}
    for how in TRANSFORMS:
        pages = [(a.step, a.kind, a.severity) for a in alerts(transform(events, how), preset=e.preset)
                 if a.status == "firing" and a.severity != "info"]
        if pages:
            paged[how] = pages[:3]
    assert paged == {}


def test_the_transforms_change_what_they_say():
    """The transforms are not no-ops (a test of the test)."""
    events = [("loss", s, 2.0 + 1.0 / s, None) for s in range(1, 101)]
    assert transform(events, "x100")[5][2] == pytest.approx(events[5][2] * 100)
    assert transform(events, "+1000")[5][2] == pytest.approx(events[5][2] + 1000)
    assert len(transform(events, "every10th")) == 10
    assert len(transform(events, "twice")) == 200
    assert len(transform(events, "gap20")) < 85
    steps = [ev[1] for ev in transform(events, "resume")]
    assert any(b < a for a, b in zip(steps, steps[1:]))
