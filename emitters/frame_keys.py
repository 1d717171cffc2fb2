"""Which key of a plain loss frame a name is: the decoder's key table (``fast_decode.py``),
derived from the protocol's declaration (``schema.py``) and checked against it at import.

Each key of a loss event or of a batch frame has a bit (`schema.KEY_BITS`); the masks of
a loss event's keys, of its required ones and of a batch's are those bits together.
``key_bit`` names a key from its length and its first bytes read as one big-endian word,
a few compares where a dict would hash a new str; `misread_keys` reads every name of
the schema that way, and a name it misreads (a field added to schema.py that
``key_bit`` cannot name yet) stops this module from loading, in both builds.
"""

from __future__ import annotations

from . import schema

_BIT = schema.KEY_BITS
V, TYPE, RUN, SEQ, STEP, LOSS, LR, GRAD_NORM = (_BIT[k] for k in (
    "v", "type", "run", "seq", "step", "loss", "lr", "grad_norm"))
TOKENS, RANK, TS, EMITTER, AUTH, EVENTS, BASE = (_BIT[k] for k in (
    "tokens", "rank", "ts", "emitter", "auth", "events", "base"))
# the same bits for fast_decode (a compiled module's C constants are not its attributes)
BITS = (V, TYPE, RUN, SEQ, STEP, LOSS, LR, GRAD_NORM, TOKENS, RANK, TS, EMITTER, AUTH, EVENTS, BASE)
REQUIRED = schema.mask(schema.LOSS_REQUIRED)          # a loss event's
EVENT_KEYS = schema.mask(schema.LOSS_KEYS)
BATCH_REQUIRED = schema.mask(schema.BATCH_REQUIRED)
BATCH_KEYS = schema.mask((*schema.BATCH_REQUIRED, *schema.BATCH_OPTIONAL))
# a frame's map: a batch's keys at fewest, a loss event's with every optional field at most
FEWEST_KEYS = min(len(schema.BATCH_REQUIRED), len(schema.LOSS_REQUIRED))
MOST_KEYS = max(len(schema.LOSS_KEYS), len(schema.BATCH_REQUIRED) + len(schema.BATCH_OPTIONAL))


def key_bit(n: int, w: int, ninth: int) -> int:
    """The bit of the key of ``n`` bytes whose first (up to 8) bytes are the big-endian
    ``w`` and whose ninth is ``ninth`` (0 when shorter); 0 for a name that is no key."""
    if n == 4:      # step, loss, type, rank, auth, base
        return (STEP if w == 0x73746570 else LOSS if w == 0x6c6f7373 else TYPE if w == 0x74797065
                else RANK if w == 0x72616e6b else AUTH if w == 0x61757468
                else BASE if w == 0x62617365 else 0)
    if n == 3:
        return SEQ if w == 0x736571 else RUN if w == 0x72756e else 0
    if n == 2:
        return LR if w == 0x6c72 else TS if w == 0x7473 else 0
    if n == 1:
        return V if w == 0x76 else 0
    if n == 6:
        return TOKENS if w == 0x746f6b656e73 else EVENTS if w == 0x6576656e7473 else 0
    if n == 7:
        return EMITTER if w == 0x656d6974746572 else 0
    if n == 9 and w == 0x677261645f6e6f72 and ninth == 0x6d:   # "grad_nor" "m"
        return GRAD_NORM
    return 0


def read_name(name: str) -> int:
    """``key_bit`` of ``name``, read as the decoder reads a key's bytes."""
    raw = name.encode()
    n = len(raw)
    if n == 0 or n > 9:
        return 0
    return key_bit(n, int.from_bytes(raw[:8], "big"), raw[8] if n == 9 else 0)


# the loss fields of time and memory: not read here (0), so a frame with one is not plain
TIMED = tuple(schema.TIMING)


def misread_keys() -> list[str]:
    """The schema's key names that ``key_bit`` does not read as their bit (the `TIMED`
    ones as none), and names that are no key but read as one: empty, or this module
    refuses to load."""
    cases = {**schema.KEY_BITS, "steps": 0, "los": 0, "grad_norms": 0, "grad_nor": 0, "": 0,
             **{name: 0 for name in TIMED}}
    return [name for name, bit in cases.items() if read_name(name) != bit]


if misread_keys():
    raise ImportError(f"frame_keys: key_bit misreads {misread_keys()} (emitters/schema.py)")
