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


class TestRegistryContract:
    """The recipe of docs/ARCHITECTURE.md, "Adding a detector": a detector in a preset is
    built from the registry, fed by the monitor at the stage it names, and, when it pages,
    gives a verdict; none of that takes a line in the monitor."""

    @pytest.mark.parametrize("name", sorted(REGISTRY))
    def test_names_a_stage_and_a_verdict(self, name):
        from wtwin.detect.base import STAGES
        from wtwin.detect.finding import Verdict
        cls = REGISTRY[name]
        assert cls.FEED in STAGES, f"{name}: FEED {cls.FEED!r} is no stage of an update"
        if cls.KIND:
            det = cls()
            for t, v in stream(400):
                det.update(t, v)
            v = det.verdict()
            assert isinstance(v, Verdict) and v.kind == cls.KIND
            assert v.severity in ("info", "warning", "critical") and isinstance(v.active, bool)

    @pytest.mark.parametrize("preset", ["pretraining", "adaptive_pretraining", "finetuning",
                                        "custom"])
    def test_every_detector_of_a_preset_is_fed(self, preset):
        """Each detector the monitor holds is in exactly one stage, and its learned state
        moves when the monitor is fed (a detector built and never fed cannot happen)."""
        from wtwin.detect import RunMonitor
        mon = RunMonitor(preset)
        fed = [n for names in mon.fed.values() for n in names]
        assert sorted(fed) == sorted(mon.detectors) and len(fed) == len(set(fed))
        fresh = {k: det.snapshot() for k, det in mon.detectors.items()}
        for t, v in stream(1500):
            mon.update_loss(t, v, lr=3e-4, grad_norm=1.0 + 0.1 * (t % 7))
        moved = {k for k, det in mon.detectors.items() if det.snapshot() != fresh[k]}
        assert moved == set(mon.detectors), f"never fed: {set(mon.detectors) - moved}"

    def test_a_detector_that_names_no_stage_is_refused(self):
        """A detector class without a stage is refused when the monitor is built, not
        carried along unfed."""
        from wtwin.detect.errors import ConfigError
        from wtwin.detect.monitor import stages

        class Unfed:
            FEED = ""
        with pytest.raises(ConfigError, match="names no stage"):
            stages({"unfed": Unfed()})


def test_no_private_reads_across_objects():
    """No module of wtwin.detect reads another object's underscored field (the arbiter
    reads verdicts): only ``self._x`` and ``cls._x``."""
    import pathlib
    import re
    import wtwin.detect
    folder = pathlib.Path(wtwin.detect.BUILD and wtwin.detect.__file__).parent
    pat = re.compile(r"\b(?!self\b|cls\b)([a-z_][a-z0-9_]*)\._(?!_)[a-z][a-z0-9_]*")
    allowed = {"cython", "_cython_shim"}
    hits = []
    for path in sorted(folder.glob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if code.lstrip().startswith(('"', "'", "``")):
                continue
            for m in pat.finditer(code):
                if m.group(1) not in allowed and not code[m.start() - 1:m.start()] in "`":
                    hits.append(f"{path.name}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)
