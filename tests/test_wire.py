"""Wire protocol v1: what is accepted, what is rejected, and under which reason."""

import math

import msgpack
import pytest

from wtwin.emitters import wire


def ev(**kw):
    base = {"v": 1, "type": "loss", "run": "r", "seq": 1, "step": 3, "loss": 2.5}
    base.update(kw)
    return base


class TestDecode:
    def test_valid_loss_event_round_trips(self):
        events, rejects = wire.decode(wire.encode(ev(lr=1e-3, grad_norm=0.5)))
        assert rejects == [] and events[0]["lr"] == 1e-3

    def test_negative_lr_is_refused(self):
        """A negative learning rate is no schedule (the laws take its log): refused, plainly;
        one frame of several events refuses only that event, on the batch path too."""
        events, rejects = wire.decode(wire.encode(ev(lr=-1e-3)))
        assert events == [] and rejects == ["bad_value"]
        batch = msgpack.packb({"v": 1, "type": "batch", "events": [
            ev(seq=i, step=i, lr=(-1e-3 if i == 2 else 1e-3)) for i in range(1, 5)]})
        events, rejects = wire.decode(batch)
        assert [e["seq"] for e in events] == [1, 3, 4] and rejects == ["bad_value"]
        events, rejects = wire.decode(wire.encode(ev(lr=math.nan)))   # unknown: passes
        assert rejects == [] and math.isnan(events[0]["lr"])

    def test_nonfinite_loss_is_not_malformed(self):
        events, rejects = wire.decode(wire.encode(ev(loss=math.nan)))
        assert rejects == [] and math.isnan(events[0]["loss"])

    @pytest.mark.parametrize("frame,reason", [
        (b"\xc1\xc1", "undecodable"),
        (msgpack.packb([1, 2]), "not_a_map"),
        (wire.encode(ev(v=2)), "bad_version"),
        (wire.encode(ev(type="bogus")), "unknown_type"),
        (wire.encode({k: v for k, v in ev().items() if k != "loss"}), "missing_field"),
        (wire.encode(ev(loss="2.5")), "bad_type"),
        (wire.encode(ev(step=True)), "bad_type"),
        (wire.encode(ev(step=math.inf)), "nonfinite_step"),
        (wire.encode(ev(step=-1)), "bad_value"),
        (wire.encode(ev(run="")), "bad_type"),
        (wire.encode(ev(seq=-3)), "bad_type"),
        (wire.encode({"v": 1, "type": "batch", "events": "x"}), "bad_batch"),
        (wire.encode({"v": 1, "type": "checkpoint", "run": "r", "seq": 1, "step": 1,
                      "path": "/x", "format": "pickle"}), "bad_value"),
        (wire.encode({"v": 1, "type": "eval", "run": "r", "seq": 1, "step": 1,
                      "metrics": {"val_loss": "high"}}), "bad_type"),
    ])
    def test_bad_frames_are_rejected_with_a_reason(self, frame, reason):
        events, rejects = wire.decode(frame)
        assert events == [] and rejects == [reason]
        assert reason in wire.REJECT_REASONS

    def test_oversized_frame_is_rejected_before_decoding(self):
        frame = wire.encode(ev(run="x" * 100)) + b"\x00" * 5000
        assert wire.decode(frame, max_bytes=1024) == ([], ["oversized"])

    def test_batch_keeps_good_events_and_counts_bad_ones(self):
        frame = wire.encode_batch([ev(seq=1), ev(seq=2, loss="x"), 7, ev(seq=3)], emitter="e1")
        events, rejects = wire.decode(frame)
        assert [e["seq"] for e in events] == [1, 3]
        assert all(e["emitter"] == "e1" for e in events)
        assert sorted(rejects) == ["bad_type", "not_a_map"]

    def test_run_start_kind_is_a_string(self):
        frame = wire.encode({"v": 1, "type": "run_start", "run": "r", "seq": 1, "kind": 3})
        assert wire.decode(frame) == ([], ["bad_type"])

    def test_every_event_type_has_a_valid_example(self):
        examples = {
            "run_start": {"config": {"lr": 1e-3}, "preset": "pretraining", "kind": "finetuning"},
            "loss": {"step": 1, "loss": 1.0},
            "eval": {"step": 1, "metrics": {"val_loss": 1.0}},
            "checkpoint": {"step": 1, "path": "/c.pt", "format": "torch", "want": ["analyze"]},
            "heartbeat": {"dropped": 0},
            "run_end": {"status": "completed"},
            "rewind": {"step": 500, "from_step": 624, "kind": "divergence", "lr_scale": 0.5, "count": 1},
            "scalar": {"step": 1, "name": "eval/acc", "value": 0.5},
        }
        assert set(examples) == set(wire.EVENT_TYPES)
        for kind, fields in examples.items():
            events, rejects = wire.decode(wire.encode({"v": 1, "type": kind, "run": "r", "seq": 1, **fields}))
            assert rejects == [], kind


class TestRewindEvent:
    BASE = {"v": 1, "type": "rewind", "run": "r", "seq": 1}

    @pytest.mark.parametrize("fields, reason", [
        ({"from_step": 10}, "missing_field"),
        ({"step": 11, "from_step": 10}, "bad_value"),           # forward is no rewind
        ({"step": -1, "from_step": 10}, "bad_value"),
        ({"step": 5, "from_step": 10, "lr_scale": 0.0}, "bad_value"),
        ({"step": 5, "from_step": 10, "lr_scale": float("nan")}, "bad_value"),
        ({"step": 5, "from_step": 10, "count": 0}, "bad_value"),
        ({"step": 5, "from_step": 10, "kind": "x" * 65}, "bad_value"),
        ({"step": 5.0, "from_step": 10}, "bad_type"),
        ({"step": 5, "from_step": 10, "checkpoint": 3}, "bad_type"),
    ])
    def test_bad_rewind_events_are_rejected_with_a_reason(self, fields, reason):
        """A rewind goes back (0 <= step <= from_step) with a sane lr scale and count."""
        events, rejects = wire.decode(wire.encode({**self.BASE, **fields}))
        assert events == [] and rejects == [reason]

    def test_a_minimal_rewind_is_valid(self):
        """Only the two steps are required."""
        events, rejects = wire.decode(wire.encode({**self.BASE, "step": 0, "from_step": 0}))
        assert rejects == [] and events[0]["step"] == 0


def deep_config_frame(depth: int) -> bytes:
    """A run_start whose config nests ``depth`` maps deep (msgpack's own packer stops at 512)."""
    config = b"\x81\xa1a" * (depth - 1) + b"\x80"
    head = wire.encode({"v": 1, "type": "run_start", "run": "deep", "seq": 1})
    return bytes([head[0] + 1]) + head[1:] + b"\xa6config" + config  # one more key: config


class TestBounds:
    """Every number fits SQLite's int64; every nested value has a bounded depth and size."""

    @pytest.mark.parametrize("fields", [
        {"step": 2**64 - 1}, {"step": 2**63}, {"seq": 2**63}, {"rank": -1}, {"rank": 2**64 - 1},
        {"emitter": "e" * 65}, {"auth": "a" * 129},
    ])
    def test_loss_fields_out_of_range_are_bad_value(self, fields):
        assert wire.decode(wire.encode(ev(**fields))) == ([], ["bad_value"])

    def test_int64_max_step_is_accepted(self):
        events, rejects = wire.decode(wire.encode(ev(step=2**63 - 1)))
        assert rejects == [] and events[0]["step"] == 2**63 - 1

    @pytest.mark.parametrize("kind,fields", [
        ("eval", {"step": -1, "metrics": {"val_loss": 1.0}}),
        ("checkpoint", {"step": -5, "path": "/c.pt"}),
        ("checkpoint", {"step": 1, "path": "/c.pt", "epoch": -1}),
        ("checkpoint", {"step": 2**64 - 1, "path": "/c.pt"}),
        ("checkpoint", {"step": 1, "path": "/c.pt", "want": ["analyze"] * 5}),
        ("heartbeat", {"dropped": -1}),
        ("eval", {"step": 1, "metrics": {f"m{i}": 1.0 for i in range(65)}}),
        ("eval", {"step": 1, "metrics": {"m" * 129: 1.0}}),
        ("run_start", {"preset": "p" * 65}),
        ("run_start", {"config": {"s": "x" * 4097}}),
        ("run_start", {"config": {"n": 2**64 - 1}}),
        ("run_start", {"config": {f"k{i}": [0] * 10 for i in range(400)}}),
        ("run_start", {"config": {f"k{i}": "x" * 4000 for i in range(17)}}),
    ])
    def test_out_of_bounds_is_bad_value(self, kind, fields):
        frame = wire.encode({"v": 1, "type": kind, "run": "r", "seq": 1, **fields})
        assert wire.decode(frame) == ([], ["bad_value"])

    def test_config_nested_999_deep_is_rejected_without_recursion(self):
        assert wire.decode(deep_config_frame(999)) == ([], ["bad_value"])
        assert wire.decode(deep_config_frame(16))[1] == []

    def test_config_with_a_binary_value_or_key_is_bad_type(self):
        for config in ({"b": b"\x00"}, {b"k": 1}):
            raw = msgpack.packb({"v": 1, "type": "run_start", "run": "r", "seq": 1, "config": config},
                                use_bin_type=True)
            assert wire.decode(raw)[1] in (["bad_type"], ["undecodable"])

    def test_batch_auth_is_inherited_like_the_emitter_id(self):
        frame = msgpack.packb({"v": 1, "type": "batch", "emitter": "e", "auth": "s3cret",
                               "events": [ev(seq=1), ev(seq=2)]})
        events, _ = wire.decode(frame)
        assert [e["auth"] for e in events] == ["s3cret", "s3cret"]
