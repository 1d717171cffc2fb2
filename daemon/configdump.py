"""Render a config (dataclasses) back as TOML: `wtwind --print-config`."""

from __future__ import annotations

import dataclasses
import json


def to_toml(cfg) -> str:
    lines: list[str] = []
    _section(cfg, "", lines)
    return "\n".join(lines).strip() + "\n"


def _section(obj, path: str, lines: list[str]) -> None:
    scalars, tables, arrays = [], [], []
    for f in dataclasses.fields(obj):
        val = getattr(obj, f.name)
        if dataclasses.is_dataclass(val):
            tables.append((f.name, val))
        elif isinstance(val, tuple) and val and dataclasses.is_dataclass(val[0]):
            arrays.append((f.name, val))
        else:
            scalars.append((f.name, val))
    if path and scalars:
        lines.append(f"\n[{path}]")
    for name, val in scalars:
        if val is not None:
            lines.append(f"{name} = {_value(val)}")
    for name, val in tables:
        _section(val, f"{path}.{name}" if path else name, lines)
    for name, items in arrays:
        for item in items:
            lines.append(f"\n[[{path + '.' if path else ''}{name}]]")
            sub: list[str] = []
            _section(item, "", sub)
            lines.extend(sub)


def _value(val) -> str:
    if isinstance(val, bool):
        return "true" if val else "false"
    if isinstance(val, (int, float)):
        return repr(val)
    if isinstance(val, str):
        return json.dumps(val)
    if isinstance(val, (tuple, list)):
        return "[" + ", ".join(_value(v) for v in val) + "]"
    if isinstance(val, dict):
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in val.items()) + "}"
    return json.dumps(str(val))
