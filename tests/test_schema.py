"""One definition of a frame (emitters/schema.py): the general checks, the fast checks and
the decoder's key table are schema.py's, in both builds."""

from __future__ import annotations

import ast
from pathlib import Path

from wtwin.emitters import fast_checks, frame_keys, schema, wire


class TestDerived:
    def test_the_general_checks_walk_the_schema(self):
        assert wire.SCHEMA is schema.SCHEMA and wire._COMMON_OPTIONAL is schema.COMMON_OPTIONAL

    def test_the_fast_checks_take_their_keys_from_the_schema(self):
        assert fast_checks._LOSS_KEYS == set(schema.LOSS_KEYS) == {
            *schema.ENVELOPE, *schema.SCHEMA["loss"][0], *schema.SCHEMA["loss"][1],
            *schema.COMMON_OPTIONAL}
        assert fast_checks._LOSS_REQUIRED == {*schema.ENVELOPE, *schema.SCHEMA["loss"][0]}

    def test_plain_loss_reads_every_field_of_a_loss_event(self):
        """The one hand-unrolled check: each ``get`` of ``plain_loss`` is a loss key, and
        each loss key is read (a field added to schema.py and not read here fails), but
        the fields of time and memory, whose events it leaves to the general checks."""
        tree = ast.parse(Path(fast_checks.__file__).with_name("fast_checks.py").read_text())
        (node,) = [n for n in tree.body if getattr(n, "name", "") == "plain_loss"]
        read = {c.args[0].value for c in ast.walk(node) if isinstance(c, ast.Call)
                and getattr(c.func, "id", None) == "get" and c.args and isinstance(c.args[0], ast.Constant)}
        assert read == set(schema.LOSS_KEYS) - set(schema.TIMING)
        assert fast_checks._TIMED == set(schema.TIMING)

    def test_an_event_with_a_field_of_time_or_memory_is_not_plain(self):
        """Each of them, even of a bad type, sends the event to the general checks (which
        refuse the bad one)."""
        base = {"v": 1, "type": "loss", "run": "r", "seq": 1, "step": 1, "loss": 1.0}
        assert fast_checks.plain_loss(base)
        for name in schema.TIMING:
            for value in (1, "abc"):
                assert not fast_checks.plain_loss({**base, name: value}), name

    def test_the_decoder_reads_each_key_name_as_its_schema_bit(self):
        assert frame_keys.misread_keys() == []
        assert {name: frame_keys.read_name(name) for name in schema.KEY_BITS} == {
            name: 0 if name in frame_keys.TIMED else bit for name, bit in schema.KEY_BITS.items()}

    def test_a_name_that_is_no_key_reads_as_none(self):
        for name in ("step ", "Loss", "grad_norm2", "tokenz", "emitters", "x" * 9, "events_"):
            assert frame_keys.read_name(name) == 0, name


class TestScalarEvent:
    def test_a_scalar_event_is_declared_once_and_checked_by_name(self):
        """``scalar`` is the schema's; its name is 1..64 chars of letters, digits and
        ``_./-:`` (bad_value otherwise), its value any number (NaN and inf allowed)."""
        assert "scalar" in wire.EVENT_TYPES and schema.SCHEMA["scalar"][0] == {
            "step": schema.INT, "name": schema.STR, "value": schema.NUM}
        base = {"v": 1, "type": "scalar", "run": "r", "seq": 1, "step": 3, "name": "eval/acc-1:top.5",
                "value": float("nan")}
        assert wire.validate(dict(base))["name"] == "eval/acc-1:top.5"
        for name in ("", "x" * 65, "a b", "é", "a\n", "<b>"):
            try:
                wire.validate({**base, "name": name})
            except wire.WireError as exc:
                assert exc.reason == "bad_value", name
            else:
                raise AssertionError(f"{name!r} accepted")
        wire.validate({**base, "name": "x" * 64, "value": float("inf")})
