"""Render a config (dataclasses) back as TOML: ``wtwind --print-config``.

The config becomes plain tables (``None`` left out: TOML has no null, and an absent key
loads back as ``None``; tuples become arrays) and ``tomli_w`` writes them. A tagged
union member (a ``[[sinks]]`` table) keeps its ``type``, so the output loads back to
the same config (tests/test_config.py, tests/test_sinks_config.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tomli_w


def to_toml(cfg: Any) -> str:
    return tomli_w.dumps(_plain(cfg))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        pairs = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
        return {name: _plain(v) for name, v in pairs if v is not None}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    return value
