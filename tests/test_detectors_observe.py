"""`plateau`, `effect` and `overfit` as the compiled core has them (docs/COMPILED.md): the
per-event calls (`observe`, `feed`, the attributes) say what `update` says, and the
snapshot has the shape it had before the core was compiled (None where nothing was
seen, lists where there were lists), plus the state added since at its end, so a store
written then restores. Run in both
builds (``WTWIN_PURE_PYTHON=1`` for the pure one)."""

from __future__ import annotations

import math
import random

import msgpack

from wtwin.detect.effect import EffectDetector
from wtwin.detect.overfit import OverfitDetector
from wtwin.detect.plateau import PlateauDetector
from wtwin.detect.rewind import MIN_GAP, RewindPoints

INF = math.inf
# snapshots written by the detectors of before the compiled core (main at 912ab1f):
# fresh, and after the points 3.0 - 0.01 t at t = 1..5 (plateau: forecast 2.9)
BEFORE = {
    PlateauDetector: (
        {"_lnoise": 0.0, "_same": 0, "_prev": None, "_level": None, "_last_n": -INF,
         "_dprev": None, "_first": None, "_last": None, "_ref": -INF, "_best": INF, "_n": 0,
         "_ring": [], "_dt": 1.0, "_sums": [0.0] * 8, "_u": None, "_t": 0.0, "_noise": 0.0,
         "_slopes": [], "_armed": None, "_slow": False, "_onset": None, "_hole": None},
        {"_lnoise": 7.628527600069556e-05, "_same": 0, "_prev": 2.95,
         "_level": 2.9886420941795646, "_last_n": 5, "_dprev": -0.0005394235327442765,
         "_first": 1, "_last": 5, "_ref": 2.99, "_best": 2.9886420941795646, "_n": 5,
         "_ring": [[1, 2.99, 2.9]], "_dt": 1.0,
         "_sums": [1.7169229079145523, -0.21262919970877758, 0.08836249180164236,
                   5.075458366054334, -0.6313382835541538, 1.2515652708179585,
                   -0.055248763237805344, 0.014467293751572737],
         "_u": 1.791759469228055, "_t": 6.0, "_noise": 0.0, "_slopes": [], "_armed": None,
         "_slow": False, "_onset": None, "_hole": None}),
    EffectDetector: (
        {"_n": 0, "_first": None, "_last": None, "_dt": 1.0, "_noise": 0.0, "_prev": None,
         "_level": 0.0, "_fast": 0.0, "_start": -INF, "_best": INF, "_lags": [0.0, 0.0, 0.0],
         "_next": 0.0, "_k": 0, "_kw": 0, "_pred_best": INF, "_lr_peak": 0.0, "_lr_low": INF,
         "_devs": [], "_wob": 0.0},
        {"_n": 5, "_first": 1, "_last": 5, "_dt": 1.0, "_noise": 0.010000000000000054,
         "_prev": 2.95, "_level": 2.9893140044492963, "_fast": 2.9867077034636864,
         "_start": 2.99, "_best": INF, "_lags": [2.9899309249543706, 0.0, 0.0], "_next": 202.0,
         "_k": 1, "_kw": 0, "_pred_best": INF, "_lr_peak": 0.0, "_lr_low": INF, "_devs": [],
         "_wob": 0.0}),
    OverfitDetector: (
        {"_vfirst": None, "_vprev": [], "_vnoise": 0.0, "_tfirst": None, "_train": None,
         "_tstep": None, "_best": INF, "_train_at_best": None, "_evals": 0, "_above": 0},
        {"_vfirst": 2.5, "_vprev": [2.5], "_vnoise": 0.0, "_tfirst": 2.99,
         "_train": 2.9886420941795646, "_tstep": 5, "_best": 2.5,
         "_train_at_best": 2.9886420941795646, "_evals": 1, "_above": 0}),
}

# state added since, last in the snapshot, with its fresh values: an old snapshot restores
# without it (the fresh value stays) and the rest of the shape is as it was
ADDED = {
    PlateauDetector: {"_before": None, "_dec": -1},     # the print's resolution (2026-12-06)
    EffectDetector: {"_lr_up": False},                  # the lr still rising (2026-12-06)
    OverfitDetector: {"_vmin": INF},                    # the lowest single eval (2026-12-07)
}


def as_before(cls, snap: dict) -> dict:
    """``snap`` without the state `ADDED` since, which must come last."""
    added = ADDED[cls]
    assert list(snap)[len(snap) - len(added):] == list(added), cls.__name__
    return {k: v for k, v in snap.items() if k not in added}


def five(det):
    for t in range(1, 6):
        if isinstance(det, PlateauDetector):
            det.update(t, 3.0 - 0.01 * t, 2.9, False)
        elif isinstance(det, EffectDetector):
            det.update(t, 3.0 - 0.01 * t)
        else:
            det.update_train(t, 3.0 - 0.01 * t)
    if isinstance(det, OverfitDetector):
        det.update(5, 2.5)
    return det


def packed(snap) -> bytes:
    return msgpack.packb(snap, use_bin_type=True)


def stream(seed=7, n=12000):
    """Steps with gaps, a resume (steps back), NaNs and a frozen stretch."""
    rng, t = random.Random(seed), 0
    for i in range(n):
        t = t - 900 if i == 7000 else t + (rng.randint(50, 400) if rng.random() < 0.01 else 1)
        loss = 3.2 if 4000 <= i < 4030 else 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05)
        yield t, (math.nan if rng.random() < 0.002 else loss), (None if i % 7 == 0 else 2.6 + 9.0 * t ** -0.35)


class TestSnapshotShape:
    def test_fresh_and_young_snapshots_are_as_before(self):
        """Byte for byte what the detectors wrote before the core was compiled."""
        for cls, (fresh, young) in BEFORE.items():
            snap = cls().snapshot()
            assert packed(as_before(cls, snap)) == packed(fresh), cls.__name__
            assert {k: snap[k] for k in ADDED[cls]} == ADDED[cls], cls.__name__
            assert packed(as_before(cls, five(cls()).snapshot())) == packed(young), cls.__name__

    def test_a_snapshot_of_before_restores(self):
        """Restored from the old shape, a detector writes it back and goes on as the one
        that saw the points."""
        for cls, (_, young) in BEFORE.items():
            det = cls()
            det.restore(msgpack.unpackb(packed(young), strict_map_key=False))
            assert packed(as_before(cls, det.snapshot())) == packed(young), cls.__name__
            ref = five(cls())
            if cls is PlateauDetector:
                assert det.update(6, 2.93, 2.9, True) == ref.update(6, 2.93, 2.9, True)
            elif cls is EffectDetector:
                assert det.update(6, 2.93) == ref.update(6, 2.93)
            else:
                det.update_train(6, 2.93), ref.update_train(6, 2.93)
                assert det.update(6, 2.6) == ref.update(6, 2.6)


class TestObserve:
    def test_plateau_observe_is_update(self):
        """observe() returns ``active``; its attributes are the state's fields (``z`` the
        ``slow_z`` statistic), and state() is what update() returns."""
        a, b = PlateauDetector(grace=500, window=200), PlateauDetector(grace=500, window=200)
        actives = 0
        for t, loss, lp in stream():
            st = a.update(t, loss, lp, lp is not None)
            active = b.observe(t, loss, lp, lp is not None)
            got = (b.step, b.active, b.rule, b.progress, b.level, b.z, b.shortfall, b.repeats,
                   b.progress_z, b.expected, b.observed, b.onset)
            assert active == st.active and got == tuple(st) and b.state() == st
            actives += active
        assert actives > 0 and b.slow_z == 3.0     # the argument keeps its name

    def test_effect_feed_and_its_values(self):
        a, b = EffectDetector(), EffectDetector()
        for t, loss, lp in stream(seed=3):
            st = a.update(t, loss, False, lp, 1e-3)
            b.feed(t, loss, False, lp, 1e-3)
            assert b.state(t) == st
            assert (b.level, b.progress, b.unit) == (st.level, st.progress, st.unit)
        unit = max(st.unit, st.noise)
        assert b.score(0.5) == 0.5 / st.unit and b.score(0.5, True) == 0.5 / unit

    def test_overfit_observe_is_update(self):
        a, b = OverfitDetector(), OverfitDetector()
        assert b.state().train is None
        for s in range(1, 20001):
            a.update_train(s, 3.0 - s / 20000)
            b.update_train(s, 3.0 - s / 20000)
            if s % 500 == 0:
                val = 2.5 + abs(s - 10000) / 10000
                st = a.update(s, val)
                assert b.observe(s, val) == st.active and b.state() == st
        assert st.active


def test_rewind_points_next_at():
    pts = RewindPoints()
    assert pts.next_at == MIN_GAP and len(pts) == 0
    pts.take(6000, {"effect": five(EffectDetector())})
    assert pts.next_at == 7000 and len(pts) == 1
    assert pts.before(6000) is None and pts.next_at == 6000 + MIN_GAP
