"""Turn a TOML mapping into nested frozen dataclasses, naming bad keys by dotted path.

The one config walker. Each component owns its dataclass; this module only knows how to
walk them: nested dataclass fields, ``tuple[X, ...]`` of scalars or dataclasses, tables
(``dict``/``Mapping``), ``X | None``, the scalars ``str``, ``int``, ``float``, ``bool``,
and tagged unions: ``A | B | C`` of dataclasses whose ``type`` field (``init=False``)
holds their tag, picked by the table's ``type`` key (``[[sinks]]``: see
``wtwin.sinks.registry.AnySinkConfig``). Unknown keys are rejected. Errors that a
dataclass's own ``__post_init__`` raises are re-raised with the section's path.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from typing import Any, Mapping

from ..errors import ConfigError


def build(cls: type, data: Mapping[str, Any], path: str = "") -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: expected a table, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{where}: unknown key (known keys here: {known})")
        kwargs[key] = convert(hints[key], value, where)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # ConfigError included: add the section path
        raise ConfigError(_at(path, str(exc))) from None


def _at(path: str, message: str) -> str:
    """``message`` prefixed with the section's path; a section whose messages already start
    with its own name (``routes.kinds: ...``, ``retry.max_attempts ...``) is not named twice."""
    if not path:
        return message
    own = path.rsplit(".", 1)[-1].split("[", 1)[0] + "."
    return f"{path}.{message[len(own):] if message.startswith(own) else message}"


def convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        if len(args) > 1:
            return _tagged(args, value, where)
        return convert(args[0], value, where)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if origin is tuple:
        if isinstance(value, str):  # from the environment: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(convert(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, collections.abc.Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
        return dict(value)
    if tp is typing.Any:
        return value
    return _scalar(tp, value, where)


def _tagged(classes: list, value: Any, where: str) -> Any:
    """The table's ``type`` picks the class among ``classes``; the other keys are its fields."""
    tags = {_tag(c): c for c in classes}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
    kind = value.get("type")
    if kind not in tags:
        raise ConfigError(f"{where}.type: {kind!r} is not one of {sorted(tags)}")
    return build(tags[kind], {k: v for k, v in value.items() if k != "type"}, where)


def _tag(cls: type) -> str:
    tag = next((f for f in dataclasses.fields(cls) if f.name == "type"), None)
    if tag is None or tag.init or not isinstance(tag.default, str):
        raise TypeError(f"{cls.__name__}: a member of a tagged union needs a field type = field(default=TAG, init=False)")
    return tag.default


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")


def apply_env(data: dict, environ: Mapping[str, str], prefix: str = "WTWIND_") -> dict:
    """Overlay ``WTWIND_SECTION__KEY=value`` variables onto the raw mapping."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for name, value in environ.items():
        if not name.startswith(prefix) or "__" not in name:
            continue
        parts = name[len(prefix):].lower().split("__")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: {part} is not a table")
        leaf = parts[-1]
        node[leaf] = value
    return out
