"""The fast checks of protocol v1 for the event that makes up nearly all traffic: loss.

``plain_loss(ev)`` vouches for one loss event, ``loss_columns(events)`` for a batch of
loss events of one shape, a column at a time in C loops. Each says yes only when the
general checks (``wire._validate_general``) would accept every event unchanged, and
otherwise says no, never "rejected": the caller then judges the event(s) with the
general checks, which give the reason. ``tests/test_ingest_batches.py`` holds them to
that against hostile events. Every byte from a client is hostile: each bound here is
the general checks' (emitters/bounds.py), checked once per value.
"""

from __future__ import annotations

from operator import itemgetter

from . import schema
from .bounds import INT64_MAX, MAX_AUTH_LEN, MAX_EMITTER_LEN, MAX_RUN_LEN, VERSION

# a loss event's keys and the columns of a batch of them: schema.py's
_LOSS_KEYS = frozenset(schema.LOSS_KEYS)
_LOSS_REQUIRED = frozenset(schema.LOSS_REQUIRED)
_INT_COLUMNS, _NUMBER_COLUMNS, _STR_BOUNDS = schema.LOSS_INTS, schema.LOSS_NUMBERS, schema.LOSS_STRS
# the loss fields of time and memory: an event with one is not plain (the general checks
# judge it; a trainer sends them once per logged step at most)
_TIMED = frozenset(schema.TIMING)
if len(_LOSS_REQUIRED) != 6:    # plain_loss's "nothing optional" below
    raise ImportError("fast_checks: plain_loss reads 6 required loss fields, schema.py declares "
                      f"{sorted(_LOSS_REQUIRED)}")


def plain_loss(ev: dict) -> bool:
    """The fast path for the event that makes up nearly all traffic: True for a loss event
    this vouches for completely (v1, known keys only, each value of its type and in its
    bounds, no None). False sends it to the general checks, which judge it alone."""
    if not _LOSS_KEYS.issuperset(ev):
        return False
    get = ev.get
    run, seq, step, loss = get("run"), get("seq"), get("step"), get("loss")
    if (get("type") != "loss" or get("v") != VERSION or type(run) is not str
            or not 0 < len(run) <= MAX_RUN_LEN or type(seq) is not int or not 0 <= seq <= INT64_MAX
            or type(step) is not int or not 0 <= step <= INT64_MAX
            or ((t := type(loss)) is not float and t is not int)):
        return False
    if len(ev) == 6:  # v, type, run, seq, step, loss: nothing optional
        return True
    if not _TIMED.isdisjoint(ev):
        return False
    lr, gn, tokens, ts = get("lr", 0.0), get("grad_norm", 0.0), get("tokens", 0.0), get("ts", 0.0)
    em, auth, rank = get("emitter", ""), get("auth", ""), get("rank", 0)
    return (((t := type(lr)) is float or t is int) and not lr < 0 and ((t := type(gn)) is float or t is int)
            and ((t := type(tokens)) is float or t is int) and ((t := type(ts)) is float or t is int)
            and type(em) is str and len(em) <= MAX_EMITTER_LEN
            and type(auth) is str and len(auth) <= MAX_AUTH_LEN
            and type(rank) is int and 0 <= rank <= INT64_MAX)


_NUMBERS = {float, int}
_INTS = {int}
_STRS = {str}


def loss_columns(inner: list) -> dict[str, tuple] | None:
    """The batch's columns when every event is a plain loss event (as ``plain_loss``
    judges one) with the same fields as the first; else None (judged one at a time).
    A check per column, in C loops (``map``, ``zip``, ``set``, ``min``/``max``)."""
    first, n = inner[0], len(inner)
    if type(first) is not dict or not _LOSS_REQUIRED.issubset(first) or not _LOSS_KEYS.issuperset(first):
        return None
    names = tuple(first)
    if set(map(type, inner)) != {dict} or set(map(len, inner)) != {len(names)}:
        return None
    try:  # same size and every field of the first: the same fields
        columns = dict(zip(names, zip(*map(itemgetter(*names), inner))))
    except KeyError:
        return None
    if columns["type"].count("loss") != n or columns["v"].count(VERSION) != n:
        return None
    for name in _INT_COLUMNS:
        col = columns.get(name)
        if col is not None and (set(map(type, col)) != _INTS or min(col) < 0 or max(col) > INT64_MAX):
            return None
    for name in _NUMBER_COLUMNS:
        col = columns.get(name)
        if col is not None and not set(map(type, col)) <= _NUMBERS:
            return None
    lr = columns.get("lr")
    if lr is not None and any(map((0.0).__gt__, lr)):   # a negative lr: judged (refused) alone
        return None
    for name, shortest, longest in _STR_BOUNDS:
        col = columns.get(name)
        if col is not None:
            if set(map(type, col)) != _STRS:
                return None
            sizes = set(map(len, set(col)))
            if min(sizes) < shortest or max(sizes) > longest:
                return None
    return columns
