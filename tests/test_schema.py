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
        each loss key is read (a field added to schema.py and not read here fails)."""
        tree = ast.parse(Path(fast_checks.__file__).with_name("fast_checks.py").read_text())
        (node,) = [n for n in tree.body if getattr(n, "name", "") == "plain_loss"]
        read = {c.args[0].value for c in ast.walk(node) if isinstance(c, ast.Call)
                and getattr(c.func, "id", None) == "get" and c.args and isinstance(c.args[0], ast.Constant)}
        assert read == set(schema.LOSS_KEYS)

    def test_the_decoder_reads_each_key_name_as_its_schema_bit(self):
        assert frame_keys.misread_keys() == []
        assert {name: frame_keys.read_name(name) for name in schema.KEY_BITS} == schema.KEY_BITS

    def test_a_name_that_is_no_key_reads_as_none(self):
        for name in ("step ", "Loss", "grad_norm2", "tokenz", "emitters", "x" * 9, "events_"):
            assert frame_keys.read_name(name) == 0, name
