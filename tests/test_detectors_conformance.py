"""Conformance suite run over every registered detector."""

from __future__ import annotations

import pickle
import random

import msgpack
import pytest

from wtwin.detect import REGISTRY


def stream(n, seed=0, start=1):
    rng = random.Random(seed)
    for t in range(start, start + n):
        yield t, 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05)


def active(state) -> bool:
    return bool(getattr(state, "alert", False) or getattr(state, "active", False))


def size(det) -> int:
    return len(msgpack.packb(det.snapshot()))


@pytest.mark.parametrize("name", sorted(REGISTRY))
class TestConformance:
    def test_defaults_construct_and_repr(self, name):
        det = REGISTRY[name]()
        assert det.name == name and type(det).__name__ in repr(det)

    def test_clone_is_fresh(self, name):
        """clone() has the same arguments and none of the learned state."""
        det = REGISTRY[name]()
        fresh = det.snapshot()
        for t, v in stream(3000):
            det.update(t, v)
        c = det.clone()
        assert repr(c) == repr(det) and c.snapshot() == fresh

    def test_pickles(self, name):
        det = REGISTRY[name]()
        for t, v in stream(2000):
            det.update(t, v)
        back = pickle.loads(pickle.dumps(det))
        assert back.snapshot() == det.snapshot()
        assert back.update(2001, 3.0) == det.update(2001, 3.0)

    def test_snapshot_restore_exact(self, name):
        """Half a stream, msgpack snapshot, restore in a new instance: identical states."""
        data = list(stream(6000, seed=2))
        a = REGISTRY[name]()
        for t, v in data[:3000]:
            a.update(t, v)
        b = REGISTRY[name]()
        b.restore(msgpack.unpackb(msgpack.packb(a.snapshot()), strict_map_key=False))
        for t, v in data[3000:]:
            assert a.update(t, v) == b.update(t, v)

    def test_clean_seeded_stream_raises_nothing(self, name):
        det = REGISTRY[name]()
        assert not any(active(det.update(t, v)) for t, v in stream(20000, seed=3))

    def test_state_is_frozen(self, name):
        det = REGISTRY[name]()
        s = det.update(1, 3.0)
        with pytest.raises(Exception):
            s.step = 2

    @pytest.mark.slow  # 205 s on 2 busy cores (make test-all, CI)
    def test_bounded_memory_after_1e6_updates(self, name):
        """The snapshot after 10^6 updates is no bigger than after 10^5 (plus a margin)."""
        det = REGISTRY[name]()
        sizes = {}
        for t, v in stream(10 ** 6, seed=4):
            det.update(t, v)
            if t in (10 ** 5, 10 ** 6):
                sizes[t] = size(det)
        assert sizes[10 ** 6] <= 1.3 * sizes[10 ** 5] + 256
