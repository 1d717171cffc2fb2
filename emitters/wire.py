"""Wire protocol v1: the one definition both the emitter and the daemon use.

Frames are msgpack maps sent DEALER -> ROUTER. Every event carries ``v``, ``type``,
``run`` and a per-emitter ``seq``; a frame may instead be a ``batch`` of events.
This module imports only msgpack, the stdlib and its siblings ``bounds``, ``schema``
(the events' fields, declared once) and ``fast_checks``: it is on the trainer's side.

``decode(frame)`` returns ``(events, rejects)``: the valid events as plain dicts and
one reason string per rejected event. It never raises on bad input. Reasons are a
closed set (``REJECT_REASONS``) so the daemon can count them as bounded labels. The
daemon calls ``decode_frame``, which keeps a batch's fields at the frame.

Encode, decode and the general checks, read together; the fields of each event type are
declared in schema.py, and the fast checks (fast_checks.py) and the decoder of plain loss
frames (fast_decode.py) derive theirs from it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import msgpack

from .bounds import (INT64_MAX, MAX_AUTH_LEN, MAX_EMITTER_LEN, MAX_RUN_LEN, MAX_STR_LEN,
                     MAX_WANTS, VERSION, check_config, check_metrics, int_in_range,
                     reference_fields, reference_names, scalar_name_ok)  # noqa: F401 (the emitter's)
from .fast_checks import loss_columns, plain_loss
from .schema import COMMON_OPTIONAL, INT, SCHEMA, STR_LIMITS  # noqa: F401 (SCHEMA: the protocol's)

DEFAULT_MAX_FRAME_BYTES = 1 << 20
MAX_BATCH_EVENTS = 10_000

EVENT_TYPES = ("run_start", "loss", "eval", "checkpoint", "heartbeat", "run_end", "rewind", "scalar")
REPLY_TYPES = ("ack", "alert", "projection_ready", "error", "dropped")
# ``error`` replies: why the daemon refused an event (a closed set, docs/PROTOCOL.md)
ERROR_REASONS = ("not_owner", "run_table_full", "client_run_quota", "emitter_quota",
                 "config_quota", "quarantined")
# "stopped": ended by its own callback on an alert (stop_on), not by a signal or an operator
RUN_END_STATUSES = ("completed", "failed", "killed", "stopped")
# run_start.kind (what the trainer says the run is) -> the detector preset the daemon uses
# when run_start names none. Any other kind is accepted and kept; it selects nothing.
KIND_PRESETS = {"pretraining": "pretraining", "continued_pretraining": "adaptive_pretraining",
                "finetuning": "finetuning", "rl": "stationary", "gan": "stationary",
                "contrastive": "stationary", "stationary": "stationary"}
CHECKPOINT_FORMATS = ("torch", "safetensors")
# an event the checks refused, kept as its place in its emitter's sequence only
# (`decode_frame`): the emitter's later events are then no gap to re-send forever (a
# newer trainer's event type or field froze its run at an older daemon). Never a client's
# type: one a client sends is refused as ``unknown_type`` like any other.
REFUSED = "refused"
CHECKPOINT_WANTS = ("analyze", "project")

REJECT_REASONS = (
    "oversized",
    "undecodable",
    "not_a_map",
    "bad_version",
    "unknown_type",
    "missing_field",
    "bad_type",
    "bad_value",
    "nonfinite_step",
    "bad_batch",
)


class WireError(ValueError):
    """A frame or event that breaks protocol v1; ``reason`` is in REJECT_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# the events' fields and types: declared once, in schema.py
_INT = INT
_COMMON_OPTIONAL = COMMON_OPTIONAL
_STR_LIMITS = STR_LIMITS


def encode(obj: dict[str, Any]) -> bytes:
    """Pack one frame (event, batch or reply)."""
    return msgpack.packb(obj, use_bin_type=True)


def encode_batch(events: list[dict[str, Any]], emitter: str | None = None,
                 base: int | None = None, auth: str | None = None) -> bytes:
    frame: dict[str, Any] = {"v": VERSION, "type": "batch", "events": events}
    if emitter is not None:
        frame["emitter"] = emitter
    if auth is not None:  # the run's secret (emitters/run_secret.py), inherited by each event
        frame["auth"] = auth
    if base is not None:  # the oldest seq the emitter can still re-send (RELIABILITY.md)
        frame["base"] = base
    return msgpack.packb(frame, use_bin_type=True)


_unpackb = msgpack.unpackb  # msgpack >= 1.0: raw=False, strict_map_key=True are its defaults
# (passing them as keywords would cost a good part of a small event's decode)


def unpack(frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Any:
    """Size check *before* decoding, then msgpack; raises WireError."""
    if len(frame) > max_bytes:
        raise WireError("oversized", f"frame of {len(frame)} bytes exceeds {max_bytes}")
    try:
        return _unpackb(frame)
    except Exception as exc:  # msgpack raises several unrelated types
        raise WireError("undecodable", f"not msgpack: {type(exc).__name__}") from None


def decode(frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> tuple[list[dict], list[str]]:
    """Decode and validate a frame. Returns (valid events, reject reasons); the events of
    a batch carry the batch's ``emitter``, ``auth`` and ``base`` (see ``decode_frame``)."""
    events, rejects, batch = decode_frame(frame, max_bytes)
    if rejects:     # a refused event's place (`REFUSED`) is the daemon's, not a valid event
        events = [ev for ev in events if ev["type"] != REFUSED]
    if batch is not None:
        inherit(events, batch)
    elif events:
        events[0].pop("base", None)  # a batch's field only
    return events, rejects


class Batch(NamedTuple):
    """What a batch frame says of all its events (``decode_frame``)."""

    emitter: str | None   # each valid or None
    auth: str | None
    base: int | None
    # when every event is a plain loss event with the same fields: field -> its values, in
    # the events' order (validated a column at a time); else None
    columns: dict[str, tuple] | None = None


def decode_frame(frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES
                 ) -> tuple[list[dict], list[str], Batch | None]:
    """``decode`` without copying a batch's fields into each event: (events, rejects,
    batch), ``batch`` None for a single-event frame. An event of a batch that has no
    ``emitter`` (``auth``) of its own has the batch's; ``base`` is a batch's only (an
    event's own ``base`` is ignored). One pass: a batch of plain loss events of one shape
    is checked a column at a time (``loss_columns``), other events one at a time, a plain
    loss event by ``plain_loss``, every other by the general checks."""
    if len(frame) > max_bytes:
        return [], ["oversized"], None
    try:
        obj = _unpackb(frame)
    except Exception:  # msgpack raises several unrelated types
        return [], ["undecodable"], None
    if type(obj) is not dict:
        return [], ["not_a_map"], None
    if plain_loss(obj):
        return [obj], [], None
    if obj.get("type") != "batch":
        try:
            return [_validate_general(obj)], [], None
        except WireError as exc:
            kept = refused(obj, exc.reason)
            return ([kept] if kept else []), [exc.reason], None
    return _decode_batch(obj)


def refused(ev: dict, reason: str) -> dict | None:
    """A refused event's place in its emitter's sequence (type `REFUSED`, ``reason``), when
    its version, run, seq, emitter and secret are well-formed; else None (no place to keep)."""
    run, seq, em, auth = ev.get("run"), ev.get("seq"), ev.get("emitter"), ev.get("auth")
    if not (ev.get("v") == VERSION and type(run) is str and 0 < len(run) <= MAX_RUN_LEN
            and type(seq) is int and 0 <= seq <= INT64_MAX
            and (em is None or (type(em) is str and len(em) <= MAX_EMITTER_LEN))
            and (auth is None or (type(auth) is str and len(auth) <= MAX_AUTH_LEN))):
        return None
    out = {"v": VERSION, "type": REFUSED, "run": run, "seq": seq, "reason": reason}
    if em is not None:
        out["emitter"] = em
    if auth is not None:
        out["auth"] = auth
    return out


def inherit(events: list[dict], batch: Batch) -> None:
    """Copy a batch's emitter, auth and base into its events, as ``decode`` returns them."""
    emitter, auth, base = batch.emitter, batch.auth, batch.base
    for ev in events:
        if emitter is not None and "emitter" not in ev:
            ev["emitter"] = emitter
        if auth is not None and "auth" not in ev:
            ev["auth"] = auth
        if base is not None:
            ev["base"] = base
        else:  # a batch's field only
            ev.pop("base", None)


def _decode_batch(obj: dict) -> tuple[list[dict], list[str], Batch | None]:
    if obj.get("v") != VERSION:
        return [], ["bad_version"], None
    inner = obj.get("events")
    if type(inner) is not list or len(inner) > MAX_BATCH_EVENTS:
        return [], ["bad_batch"], None
    emitter, auth = obj.get("emitter"), obj.get("auth")
    base = obj.get("base")  # oldest seq the emitter still holds (acknowledged delivery)
    if type(base) is not int or not 0 <= base <= INT64_MAX:
        base = None
    if not ((emitter is None or (type(emitter) is str and len(emitter) <= MAX_EMITTER_LEN))
            and (auth is None or (type(auth) is str and len(auth) <= MAX_AUTH_LEN))):
        # a bad emitter or auth on the batch: each event inherits it first and is judged
        # with it (rejected unless it has its own), as an event that carried it would be
        for ev in inner:
            if type(ev) is dict:
                if emitter is not None and "emitter" not in ev:
                    ev["emitter"] = emitter
                if auth is not None and "auth" not in ev:
                    ev["auth"] = auth
        emitter = auth = None
    columns = loss_columns(inner) if inner else None
    if columns is not None:
        return inner, [], Batch(emitter, auth, base, columns)
    events, rejects = [], []
    keep, plain = events.append, plain_loss
    for ev in inner:
        if type(ev) is not dict:
            rejects.append("not_a_map")
        elif plain(ev):
            keep(ev)
        else:
            try:
                keep(_validate_general(ev))
            except WireError as exc:
                rejects.append(exc.reason)
                kept = refused(ev, exc.reason)
                if kept is not None:
                    keep(kept)
    return events, rejects, Batch(emitter, auth, base)


def validate(ev: dict) -> dict:
    """Check one event against SCHEMA; returns it unchanged or raises WireError."""
    if plain_loss(ev):
        return ev
    return _validate_general(ev)


def _validate_general(ev: dict) -> dict:
    if ev.get("v") != VERSION:
        raise WireError("bad_version", f"v={ev.get('v')!r}, this daemon speaks {VERSION}")
    kind = ev.get("type")
    schema = SCHEMA.get(kind) if type(kind) is str else None
    if schema is None:
        raise WireError("unknown_type", f"type={kind!r}")
    run = ev.get("run")
    if type(run) is not str or not 0 < len(run) <= MAX_RUN_LEN:
        raise WireError("missing_field" if run is None else "bad_type", "run must be a 1..200 char string")
    seq = ev.get("seq")
    if type(seq) is not int or seq < 0:
        raise WireError("missing_field" if seq is None else "bad_type", "seq must be a non-negative int")
    if seq > INT64_MAX:
        raise WireError("bad_value", "seq must fit in int64 (<= 2**63-1)")
    required, optional = schema
    for name, types in required.items():
        val = ev.get(name)
        if val is None:
            raise WireError("missing_field", f"{kind}.{name} is required")
        _check_type(kind, name, val, types)
    for table in (optional, _COMMON_OPTIONAL):
        for name, types in table.items():
            val = ev.get(name)
            if val is not None:
                _check_type(kind, name, val, types)
    check = _EXTRA_CHECKS.get(kind)
    if check is not None:
        check(ev)
    return ev


def _check_type(kind: str, name: str, val: Any, types: tuple) -> None:
    if type(val) is bool or not isinstance(val, types):
        if name == "step" and type(val) is float and not math.isfinite(val):
            raise WireError("nonfinite_step", f"{kind}.step={val!r}")
        raise WireError("bad_type", f"{kind}.{name} has type {type(val).__name__}")
    if type(val) is str and len(val) > _STR_LIMITS.get(name, MAX_STR_LEN):
        raise WireError("bad_value", f"{kind}.{name} longer than {_STR_LIMITS.get(name, MAX_STR_LEN)}")
    if types is _INT and not int_in_range(val):  # SQLite integers are int64
        raise WireError("bad_value", f"{kind}.{name} must fit in int64")


def _non_negative(ev: dict, *names: str) -> None:
    for name in names:
        val = ev.get(name)
        if type(val) is int and val < 0:
            raise WireError("bad_value", f"{ev['type']}.{name} must be >= 0")


def _check_loss(ev: dict) -> None:
    _non_negative(ev, "step", "rank")
    lr = ev.get("lr")
    if lr is not None and lr < 0:   # a schedule's law takes its log: NaN passes (unknown)
        raise WireError("bad_value", f"loss.lr must be >= 0, got {lr!r}")


def _check_eval(ev: dict) -> None:
    _non_negative(ev, "step")
    check_metrics(ev["metrics"], WireError)


def _check_run_start(ev: dict) -> None:
    config = ev.get("config")
    if config is not None:
        check_config(config, WireError)
    if ev.get("reference") is not None:
        try:
            ev["reference"] = reference_names(ev["reference"])
        except ValueError as exc:
            raise WireError("bad_value", f"run_start.{exc}") from None


def _check_heartbeat(ev: dict) -> None:
    _non_negative(ev, "dropped")


def _check_checkpoint(ev: dict) -> None:
    _non_negative(ev, "step", "epoch")
    fmt = ev.get("format")
    if fmt is not None and fmt not in CHECKPOINT_FORMATS:
        raise WireError("bad_value", f"checkpoint.format must be one of {CHECKPOINT_FORMATS}")
    if len(ev.get("want") or ()) > MAX_WANTS:
        raise WireError("bad_value", f"checkpoint.want has more than {MAX_WANTS} items")
    for want in ev.get("want") or ():
        if want not in CHECKPOINT_WANTS:
            raise WireError("bad_value", f"checkpoint.want items must be in {CHECKPOINT_WANTS}")


def _check_run_end(ev: dict) -> None:
    status = ev.get("status")
    if status is not None and status not in RUN_END_STATUSES:
        raise WireError("bad_value", f"run_end.status must be one of {RUN_END_STATUSES}")


def _check_rewind(ev: dict) -> None:
    if not 0 <= ev["step"] <= ev["from_step"]:
        raise WireError("bad_value", "rewind needs 0 <= step <= from_step")
    scale = ev.get("lr_scale")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise WireError("bad_value", "rewind.lr_scale must be a finite number > 0")
    if ev.get("count") is not None and ev["count"] < 1:
        raise WireError("bad_value", "rewind.count must be >= 1")
    if len(ev.get("kind") or "") > 64 or len(ev.get("checkpoint") or "") > 256:
        raise WireError("bad_value", "rewind.kind (64) or rewind.checkpoint (256) too long")


def _check_scalar(ev: dict) -> None:
    _non_negative(ev, "step")
    if not scalar_name_ok(ev["name"]):
        raise WireError("bad_value", "scalar.name must be letters, digits or _./-: only")


_EXTRA_CHECKS = {
    "run_start": _check_run_start,
    "heartbeat": _check_heartbeat,
    "loss": _check_loss,
    "eval": _check_eval,
    "checkpoint": _check_checkpoint,
    "run_end": _check_run_end,
    "rewind": _check_rewind,
    "scalar": _check_scalar,
}


def reply(reply_type: str, /, **fields: Any) -> bytes:
    """Daemon -> emitter frame: ack, alert, projection_ready, error or dropped."""
    if reply_type not in REPLY_TYPES:
        raise ValueError(f"unknown reply type {reply_type!r}")
    return msgpack.packb({**fields, "v": VERSION, "type": reply_type}, use_bin_type=True)
