"""Protocol v1's events, declared once: which fields each event type has, of which types.

Everything else that judges a frame is derived from this declaration, or checked
against it when it loads:

- the general checks (``wire._validate_general``) walk `SCHEMA` and `ENVELOPE`;
- the fast checks of loss events (``fast_checks.py``) take their key sets and their
  columns of integers, numbers and strings from `LOSS_KEYS` and its types;
- the decoder of plain loss frames (``fast_decode.py``) takes its key bits and masks
  from `KEY_BITS`, and checks at import that it reads every key name as that bit.

Adding a field to an event type is one line here; a field the fast paths cannot take
(a new loss field) makes them agree with the general checks again by construction, or
fails at import (the decoder's names) and in ``tests/test_fast_decode.py``.
"""

from __future__ import annotations

from .bounds import MAX_AUTH_LEN, MAX_EMITTER_LEN, MAX_RUN_LEN, MAX_SCALAR_NAME

NUM = (int, float)
STR = (str,)
MAP = (dict,)
LIST = (list, tuple)
INT = (int,)

# every event's own fields, required (``v`` is the protocol version: bounds.VERSION)
ENVELOPE: dict[str, tuple] = {"v": INT, "type": STR, "run": STR, "seq": INT}
# every event's optional fields: the send time, the emitter's id, the run's secret
COMMON_OPTIONAL: dict[str, tuple] = {"ts": NUM, "emitter": STR, "auth": STR}

# a loss event's optional fields of time and memory (docs/PROTOCOL.md; detect/throughput.py,
# detect/memory.py): seconds per step and of it waited for data, the accelerator's bytes,
# the GPUs the run holds, and a number the trainer changes with an announced schedule
# change (a batch or sequence-length ramp). The fast decoder of plain frames does not read
# them (frame_keys.TIMED): a frame with one takes the general checks.
TIMING: dict[str, tuple] = {"step_time_s": NUM, "data_wait_s": NUM, "mem_allocated": NUM,
                            "mem_reserved": NUM, "mem_total": NUM, "gpus": INT, "phase": INT}

# type -> (required fields, optional fields); each field -> accepted python types
SCHEMA: dict[str, tuple[dict[str, tuple], dict[str, tuple]]] = {
    "run_start": ({}, {"config": MAP, "preset": STR, "kind": STR, "resumed_from": STR,
                       "reference": (str, list, tuple), "group": STR}),
    "loss": (
        {"step": INT, "loss": NUM},
        {"lr": NUM, "grad_norm": NUM, "tokens": NUM, "rank": INT, **TIMING},
    ),
    "eval": ({"step": INT, "metrics": MAP}, {}),
    "checkpoint": (
        {"step": INT, "path": STR},
        {"format": STR, "epoch": INT, "want": LIST},
    ),
    "heartbeat": ({}, {"dropped": INT}),
    "run_end": ({}, {"status": STR}),
    # the audit record of a trainer-side Rewind (emitters/rewind.py): back to `step`
    "rewind": (
        {"step": INT, "from_step": INT},
        {"kind": STR, "checkpoint": STR, "lr_scale": NUM, "count": INT},
    ),
    # any other number the trainer logs (emit.scalar): one value of one name at a step; the
    # name is 1..64 chars of bounds.SCALAR_NAME_CHARS; NaN/inf allowed, as for the loss
    "scalar": ({"step": INT, "name": STR, "value": NUM}, {}),
}
# a batch frame: its events, and what they inherit (``base``: the oldest seq still held)
BATCH_REQUIRED: dict[str, tuple] = {"v": INT, "type": STR, "events": LIST}
BATCH_OPTIONAL: dict[str, tuple] = {"emitter": STR, "auth": STR, "base": INT}

# the longest str a field may hold (others: bounds.MAX_STR_LEN), and the shortest
STR_LIMITS = {"run": MAX_RUN_LEN, "emitter": MAX_EMITTER_LEN, "auth": MAX_AUTH_LEN, "preset": 64,
              "group": MAX_RUN_LEN, "reference": MAX_RUN_LEN, "name": MAX_SCALAR_NAME}
STR_SHORTEST = {"run": 1, "name": 1}

# ---- derived: the loss event, the one the fast paths read ---------------------------
LOSS_TYPES: dict[str, tuple] = {**ENVELOPE, **SCHEMA["loss"][0], **SCHEMA["loss"][1],
                                **COMMON_OPTIONAL}
LOSS_REQUIRED = (*ENVELOPE, *SCHEMA["loss"][0])
LOSS_KEYS = tuple(LOSS_TYPES)
# the columns of a batch of loss events, by what is checked in each (``v`` and ``type``
# are checked as values)
LOSS_INTS = tuple(n for n, t in LOSS_TYPES.items() if t is INT and n != "v")
LOSS_NUMBERS = tuple(n for n, t in LOSS_TYPES.items() if t is NUM)
LOSS_STRS = tuple((n, STR_SHORTEST.get(n, 0), STR_LIMITS[n])
                  for n, t in LOSS_TYPES.items() if t is STR and n != "type")

# the decoder's key bits: one per key of a loss event or of a batch frame, in this order
KEY_BITS = {name: 1 << i for i, name in enumerate(dict.fromkeys((*LOSS_KEYS, *BATCH_REQUIRED,
                                                                  *BATCH_OPTIONAL)))}


def mask(names) -> int:
    """The key bits of ``names`` together."""
    out = 0
    for name in names:
        out |= KEY_BITS[name]
    return out
