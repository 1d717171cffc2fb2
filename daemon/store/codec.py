"""RunState <-> stored row: what a run's durable snapshot holds, and how it comes back.

The snapshot is taken on the event loop (the one owner of the state) and encoded
there with msgpack, so the writer thread only ever sees immutable bytes.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack

SNAPSHOT_FORMAT = 1

_FIELDS = ("status", "first_seen", "last_seen", "last_progress", "step", "loss", "lr",
           "last_eval", "emitter_dropped", "stalled", "events")


def snapshot(run) -> dict[str, Any]:
    d = {name: getattr(run, name) for name in _FIELDS}
    d["format"] = SNAPSHOT_FORMAT
    d["preset"] = run.preset
    d["monitor"] = run.monitor.snapshot()
    d["policy"] = run.policy.snapshot()
    d["hwm"] = dict(run.hwm)
    return d


def encode(run) -> tuple:
    """The row for ``runs``: (run, status, preset, config, first, last, step, blob)."""
    blob = msgpack.packb(snapshot(run), use_bin_type=True)
    return (run.run, run.status, run.preset, json.dumps(run.config, default=str),
            run.first_seen, run.last_seen, run.step, blob)


def decode(blob: bytes) -> dict[str, Any]:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


def restore(run, config_json: str, blob: bytes) -> None:
    """Put a stored snapshot back into a fresh RunState (same preset or rebuilt)."""
    from ..detectors import RunMonitor

    d = decode(blob)
    if d.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"snapshot format {d.get('format')!r} is not {SNAPSHOT_FORMAT}")
    run.config = json.loads(config_json or "{}")
    for name in _FIELDS:
        if name in d:
            setattr(run, name, d[name])
    if d["preset"] != run.preset:
        run.monitor = RunMonitor(d["preset"])
        run.preset = d["preset"]
    run.monitor.restore(d["monitor"])
    run.policy.restore(d["policy"])
    run.hwm = {str(k): int(v) for k, v in d["hwm"].items()}
