"""RunState <-> stored row: what a run's durable snapshot holds, and how it comes back.

The snapshot is taken on the event loop (the one owner of the state) and encoded
there with msgpack, so the writer thread only ever sees immutable bytes.

Format 2 keeps the detectors' state (by far the largest part) as nested msgpack bytes:
a restore decodes only the rest (status, step, alert policy, seq marks, the spectral
watch and last job result) and hands those bytes to the run as ``frozen``; the run decodes
them the first time it needs its detectors (``RunState.thaw``). A run that is written
again before that writes the same bytes back untouched. Format 3 keeps the run's seq
marks as one value (``marks``: ``EmitterMarks.snapshot``); formats 1 (the monitor
inline) and 2 (only the ``hwm`` of each emitter) are still read.
"""

from __future__ import annotations

from typing import Any

import msgpack

from ..ingest_marks import EmitterMarks
from ..series import Spark
from .snapshot_head import decode_head, unpack

SNAPSHOT_FORMAT = 3
READABLE_FORMATS = (1, 2, 3)

_FIELDS = ("status", "first_seen", "last_seen", "last_progress", "step", "loss", "lr",
           "last_eval", "emitter_dropped", "stalled", "events",
           # absent from older snapshots: the RunState defaults stay
           "kind", "preset_from", "ended_at", "ended_firing", "nonnegative")


class Frozen:
    """A stored detector snapshot, decoded only when the run next needs its detectors."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def load(self) -> dict[str, Any]:
        return _unpack(self.blob)


def _pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


_unpack = unpack


def monitor_bytes(run) -> bytes:
    if not run.thawed and run.frozen is not None:
        return run.frozen.blob  # never thawed since it was restored: unchanged
    return _pack(run.monitor.snapshot(copy=False))  # packed at once: no copy needed


def snapshot(run) -> dict[str, Any]:
    """The run's durable state."""
    d = {name: getattr(run, name) for name in _FIELDS}
    d["format"] = SNAPSHOT_FORMAT
    d["preset"] = run.preset
    d["monitor"] = monitor_bytes(run)
    d["policy"] = run.policy.snapshot()
    d["marks"] = run.marks.snapshot()
    d["rewinds"] = list(run.rewinds)
    d["spark"] = run.spark.snapshot()
    d["owner"] = run.owner  # a principal: a key or a secret's hash, never the secret
    if run.refs is not None:  # names re-resolved on restore (daemon/references.py)
        d["references"] = run.refs.snapshot()
    if run.spectral is not None or run.spectral_result is not None:
        d["spectral"] = {"watch": run.spectral.snapshot() if run.spectral is not None else None,
                         "last_result": run.spectral_result}
    return d


class Row(tuple):
    """A ``runs`` row; ``chunks``: the history to append with it (``series_rows.write``)."""

    chunks: list = []


def encode(run) -> Row:
    """The row for ``runs``: (run, status, preset, config, first, last, step, blob), with
    the history closed since the run's last snapshot as ``row.chunks``."""
    d = snapshot(run)
    chunks = []
    if run._series is not None:   # else the stored envelopes' state goes back unchanged
        taken, chunks = run._series.take_history()
        run.history = {**(run.history or {}), **taken}
    if run.scalars is not None:   # daemon/scalars.py: one envelope per name
        taken, more = run.scalars.take_history()
        run.history = {**(run.history or {}), "scalars": taken}
        chunks = chunks + more
    if run.history:
        d["history"] = run.history
    row = Row((run.run, run.status, run.preset, run.config_json,
               run.first_seen, run.last_seen, run.step, _pack(d)))
    row.chunks = chunks
    return row


def decode(blob: bytes) -> dict[str, Any]:
    """The whole snapshot, detectors' state included, as plain data (operator commands)."""
    d = _unpack(blob)
    if isinstance(d.get("monitor"), bytes):
        d["monitor"] = _unpack(d["monitor"])
    return d


def restore(run, config_json: str, blob: bytes) -> dict[str, Any]:
    """Put a stored snapshot back into a fresh RunState; returns the decoded snapshot
    (detectors' state as bytes)."""
    d = decode_head(blob)
    if d.get("format") not in READABLE_FORMATS:
        raise ValueError(f"snapshot format {d.get('format')!r} is not one of {READABLE_FORMATS}")
    run.config_json = config_json or "{}"
    for name in _FIELDS:
        if name in d:
            setattr(run, name, d[name])
    run.policy.restore(d["policy"])
    run.marks = EmitterMarks.restore(d["marks"] if "marks" in d else {"hwm": d["hwm"]})
    run.rewinds.extend(r for r in d.get("rewinds") or () if isinstance(r, dict))
    if d.get("spark"):
        run.spark = Spark.restore(d["spark"])
    run.owner = d.get("owner")
    refs = d.get("references")
    if isinstance(refs, dict) and isinstance(refs.get("names"), list):
        from ..references import RunReference

        run.refs = RunReference([n for n in refs["names"] if isinstance(n, str)], refs.get("group"),
                                refs.get("tracker"))
        run.refs.told = bool(refs.get("told"))
    run.history = d.get("history")    # the envelopes' state: the series resume from it
    run.restored = True
    spectral = d.get("spectral") or {}
    if spectral.get("watch") is not None:
        run.spectral_watch().restore(spectral["watch"])
    run.spectral_result = spectral.get("last_result")
    monitor = d["monitor"]
    run.preset = d["preset"]
    run.freeze(Frozen(monitor if isinstance(monitor, bytes) else _pack(monitor)))
    return d
