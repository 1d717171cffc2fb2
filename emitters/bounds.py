"""Bounds on every field of protocol v1 (docs/PROTOCOL.md, "Bounds").

Everything a client sends ends up in memory, in a SQLite row or in a JSON document,
so every number must fit the column it is written to (SQLite integers are int64), and
every nested value must have a bounded depth and size: a small frame with a deeply
nested config would make ``json.dumps`` raise ``RecursionError`` inside the daemon's
flush timer, and a step of 2**64-1 would make every SQLite flush fail.

Checks raise ``(reason, detail)`` through the caller's ``WireError``; this module
imports only msgpack and the stdlib (it is on the trainer's side).
"""

from __future__ import annotations

from typing import Any, Callable

import msgpack

VERSION = 1                # the protocol: every event's and batch's ``v``
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
MAX_RUN_LEN = 200
MAX_EMITTER_LEN = 64       # the emitter's id is 16 hex chars
MAX_AUTH_LEN = 128         # the run secret: 43 chars of urlsafe base64
MAX_STR_LEN = 4096         # paths, presets, resumed_from, config strings
MAX_KEY_LEN = 128          # keys of metrics and config maps
MAX_METRICS = 64           # entries in eval.metrics
MAX_WANTS = 4              # items in checkpoint.want
MAX_CONFIG_DEPTH = 16      # run_start.config nesting (a map in a map is depth 2)
MAX_CONFIG_NODES = 4096    # values of every kind in the config, containers included
MAX_CONFIG_BYTES = 64 * 1024  # the config as msgpack
MAX_SCALAR_NAME = 64       # scalar.name: 1..64 chars of SCALAR_NAME_CHARS
SCALAR_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-:")
MAX_REFERENCES = 8         # run names in run_start.reference (the daemon uses [runs] max_references)

_LEAVES = (str, int, float, bool, type(None))


def int_in_range(val: int) -> bool:
    return INT64_MIN <= val <= INT64_MAX


def check_config(config: dict, fail: Callable[[str, str], Exception]) -> None:
    """A JSON-able tree of bounded depth, node count and size, or ``raise fail(...)``.

    Iterative (an explicit stack), so a deep config costs no Python recursion."""
    stack: list[tuple[Any, int]] = [(config, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_CONFIG_NODES:
            raise fail("bad_value", f"run_start.config has more than {MAX_CONFIG_NODES} values")
        if isinstance(node, dict):
            if depth > MAX_CONFIG_DEPTH:
                raise fail("bad_value", f"run_start.config nests deeper than {MAX_CONFIG_DEPTH}")
            for key, val in node.items():
                if type(key) is not str or len(key) > MAX_KEY_LEN:
                    raise fail("bad_type", f"run_start.config keys must be strings of <= {MAX_KEY_LEN} chars")
                stack.append((val, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_CONFIG_DEPTH:
                raise fail("bad_value", f"run_start.config nests deeper than {MAX_CONFIG_DEPTH}")
            stack.extend((val, depth + 1) for val in node)
        elif not isinstance(node, _LEAVES):
            raise fail("bad_type", f"run_start.config holds a {type(node).__name__} (not JSON-able)")
        elif type(node) is str and len(node) > MAX_STR_LEN:
            raise fail("bad_value", f"run_start.config strings must be <= {MAX_STR_LEN} chars")
        elif type(node) is int and not int_in_range(node):
            raise fail("bad_value", "run_start.config integers must fit in int64")
    size = len(msgpack.packb(config, use_bin_type=True))
    if size > MAX_CONFIG_BYTES:
        raise fail("bad_value", f"run_start.config is {size} bytes packed, over {MAX_CONFIG_BYTES}")


def reference_names(reference) -> list[str]:
    """run_start.reference as a list: one run name or several, each 1..200 chars, at most
    MAX_REFERENCES; raises ValueError in plain words (the emitter's and the wire's check)."""
    names = [reference] if isinstance(reference, str) else reference
    if not isinstance(names, (list, tuple)) or len(names) > MAX_REFERENCES:
        raise ValueError(f"reference must be a run name or a list of at most {MAX_REFERENCES}")
    for name in names:
        if type(name) is not str or not 0 < len(name) <= MAX_RUN_LEN or not name.isprintable():
            raise ValueError(f"each reference must be a run name of 1..{MAX_RUN_LEN} printable chars")
    return list(dict.fromkeys(names))


def reference_fields(reference, group) -> dict:
    """run_start's ``reference`` and ``group`` as the emitter sends them (docs/REFERENCES.md)."""
    out: dict = {}
    if reference is not None:
        out["reference"] = reference_names(reference)
    if group is not None:
        if not isinstance(group, str) or not 0 < len(group) <= MAX_RUN_LEN or not group.isprintable():
            raise ValueError(f"group must be 1..{MAX_RUN_LEN} printable chars, not {group!r}")
        out["group"] = group
    return out


def check_metrics(metrics: dict, fail: Callable[[str, str], Exception]) -> None:
    if len(metrics) > MAX_METRICS:
        raise fail("bad_value", f"eval.metrics has more than {MAX_METRICS} entries")
    for key, val in metrics.items():
        if type(key) is not str or type(val) is bool or not isinstance(val, (int, float)):
            raise fail("bad_type", "eval.metrics must map names to numbers")
        if len(key) > MAX_KEY_LEN:
            raise fail("bad_value", f"eval.metrics names must be <= {MAX_KEY_LEN} chars")


def scalar_name_ok(name) -> bool:
    """A scalar's name: 1..MAX_SCALAR_NAME chars, each a letter, digit or one of ``_./-:``
    (what HF and Lightning log: ``train/loss``, ``eval_accuracy``, ``lr-AdamW``)."""
    return (type(name) is str and 0 < len(name) <= MAX_SCALAR_NAME
            and SCALAR_NAME_CHARS.issuperset(name))


def scalar_name(key) -> str | None:
    """A logged metric's key as a scalar's name: each other char ``_``, cut at 64 chars
    (None for an empty key or one that is not a str)."""
    if type(key) is not str or not key:
        return None
    return "".join(c if c in SCALAR_NAME_CHARS else "_" for c in key[:MAX_SCALAR_NAME])
