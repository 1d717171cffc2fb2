"""The decoder of plain loss frames (emitters/fast_decode.py) against today's path.

Whenever ``fast_decode.loss_frame`` accepts a frame, ``wire.decode_frame`` accepts every
event of it, and the run, emitter, secret, base and body items the decoder gives are the
ones the daemon builds from today's events (``ingest._item``) or batch columns, equal and
of the same Python types (floats compared bit for bit). Frames: the emitter's own, every
combination of a loss event's optional fields, hostile values and strings at and over
each bound, non-minimal msgpack headers, keys twice, bin/ext/nil, batches of one run or
several, inherited and own emitters and secrets, every truncation of valid frames and
seeded random byte flips. Each check runs on the compiled decoder (where built) and on
its pure build (the same ``.py`` loaded as Python). Last, a real `Server` fed the same
frames with and without the decoder ends in the same state, and with it the frames of a
live run never reach ``wire.decode_frame``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import math
import os
import random
import struct
from itertools import repeat
from pathlib import Path

import msgpack
import pytest

from helpers import fed_state
from wtwin.daemon.ingest import _item
from wtwin.daemon.run_state import NO_LR
from wtwin.emitters import fast_decode, wire
from wtwin.emitters.events import BUILDERS
from wtwin.emitters.fast_checks import plain_loss

CI = os.environ.get("CI") == "true"
INT64_MAX = 2**63 - 1
OPTIONAL = ("lr", "grad_norm", "tokens", "rank", "ts", "emitter", "auth")


def _pure_decoder():
    """emitters/fast_decode.py loaded as Python, whichever build the package runs."""
    path = Path(fast_decode.__file__).with_name("fast_decode.py")
    spec = importlib.util.spec_from_file_location("wtwin.emitters._fast_decode_pure", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert not mod.cython.compiled
    return mod.loss_frame


PURE = _pure_decoder()


@pytest.fixture(params=["compiled", "pure"])
def decode(request):
    if request.param == "pure":
        return PURE
    if fast_decode.__file__.endswith(".py"):
        if CI:
            pytest.fail("CI=true but emitters/fast_decode is not compiled")
        pytest.skip("emitters/fast_decode is not compiled")
    return fast_decode.loss_frame


# ---- a msgpack writer that picks any legal header (today's msgpack picks the shortest) ----

class Pairs(list):
    """A map as (key, value) pairs in order: a key may come twice."""


class F32(float):
    """A float sent as float 32."""


class Raw(bytes):
    """Bytes spliced into the frame as they are (a value msgpack's writer would not write)."""


def pack(obj, rng: random.Random | None = None) -> bytes:
    """msgpack of ``obj``; with ``rng``, each header in a random one of its legal forms."""
    out = bytearray()
    _pack(obj, rng, out)
    return bytes(out)


def _pick(rng, forms):
    return forms[0] if rng is None else rng.choice(forms)


def _pack(obj, rng, out: bytearray) -> None:
    if isinstance(obj, Raw):
        out += obj
    elif obj is None or type(obj) is bool:
        out += {None: b"\xc0", False: b"\xc2", True: b"\xc3"}[obj]
    elif type(obj) is int:
        forms = []
        if 0 <= obj < 128:
            forms.append(bytes([obj]))
        if -32 <= obj < 0:
            forms.append(struct.pack(">b", obj))
        for code, fmt, lo, hi in ((0xcc, ">B", 0, 2**8), (0xcd, ">H", 0, 2**16), (0xce, ">I", 0, 2**32),
                                  (0xcf, ">Q", 0, 2**64), (0xd0, ">b", -2**7, 2**7),
                                  (0xd1, ">h", -2**15, 2**15), (0xd2, ">i", -2**31, 2**31),
                                  (0xd3, ">q", -2**63, 2**63)):
            if lo <= obj < hi:
                forms.append(bytes([code]) + struct.pack(fmt, obj))
        out += _pick(rng, forms)
    elif type(obj) is F32:
        out += b"\xca" + struct.pack(">f", obj)
    elif type(obj) is float:
        out += b"\xcb" + struct.pack(">d", obj)
    elif type(obj) is str:
        _head(len(data := obj.encode("utf-8", "surrogatepass")), (0xa0, 32), (0xd9, 0xda, 0xdb), rng, out)
        out += data
    elif type(obj) is bytes:
        _head(len(obj), None, (0xc4, 0xc5, 0xc6), rng, out)
        out += obj
    elif isinstance(obj, msgpack.ExtType):
        out += msgpack.packb(obj)
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, Pairs):
        _head(len(obj), (0x90, 16), (None, 0xdc, 0xdd), rng, out)
        for x in obj:
            _pack(x, rng, out)
    else:
        pairs = obj if isinstance(obj, Pairs) else list(obj.items())
        _head(len(pairs), (0x80, 16), (None, 0xde, 0xdf), rng, out)
        for k, v in pairs:
            _pack(k, rng, out)
            _pack(v, rng, out)


def _head(n: int, fix, codes, rng, out: bytearray) -> None:
    forms = []
    if fix is not None and n < fix[1]:
        forms.append(bytes([fix[0] | n]))
    for code, fmt, hi in zip(codes, (">B", ">H", ">I"), (2**8, 2**16, 2**32)):
        if code is not None and n < hi:
            forms.append(bytes([code]) + struct.pack(fmt, n))
    out += _pick(rng, forms)


# ---- the contract --------------------------------------------------------------------------

def _same(a, b) -> bool:
    """Equal and of the same types, floats bit for bit (NaN's payload too)."""
    if a is NO_LR or b is NO_LR:
        return a is b
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return struct.pack(">d", a) == struct.pack(">d", b)
    return a == b


def today(frame: bytes):
    """What the daemon builds from ``wire.decode_frame`` for a frame of plain loss events of
    one run, emitter and secret: (run, emitter, auth, base, items); None for any other frame."""
    events, rejects, batch = wire.decode_frame(frame)
    if rejects or not events:
        return None
    if batch is None:
        ev = events[0]
        if ev["type"] != "loss" or not plain_loss(ev):
            return None
        return (ev["run"], ev.get("emitter"), ev.get("auth"), None, [_item(ev)])
    cols, n = batch.columns, len(events)
    if cols is None:
        return None
    get = cols.get
    ems, auths = get("emitter"), get("auth")
    em = ems[0] if ems is not None else batch.emitter
    auth = auths[0] if auths is not None else batch.auth
    if cols["run"].count(cols["run"][0]) != n or (ems is not None and ems.count(em) != n) \
            or (auths is not None and auths.count(auth) != n):
        return None
    items = list(zip(cols["seq"], repeat(None, n), cols["step"], cols["loss"], get("lr") or repeat(NO_LR, n),
                     get("grad_norm") or repeat(None, n), get("tokens") or repeat(None, n),
                     get("ts") or repeat(None, n)))
    return (cols["run"][0], em, auth, batch.base, items)


def agrees(decode, frame: bytes) -> bool:
    """The decoder declines ``frame`` (False) or gives exactly today's values (True)."""
    got = decode(frame, NO_LR)
    if got is None:
        return False
    want = today(frame)
    assert want is not None, frame
    run, em, auth, base, items = got
    assert _same((run, em, auth, base, list(items)), want), (frame, got, want)
    return True


# ---- frames ----------------------------------------------------------------------------------

INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32, INT64_MAX, 2**63, 2**64 - 1,
        -1, -32, -33, -128, -129, -2**31, -2**63]
FLOATS = [0.0, -0.0, 1.5, -2.5, 3e-4, math.nan, -math.nan, math.inf, -math.inf, 1e308, 5e-324,
          F32(1.5), F32(3e-4), F32(-0.0), F32(math.nan), F32(math.inf)]
SNAN32 = Raw(b"\xca\x7f\x80\x00\x01")      # a float32 signalling NaN, with a payload
SNAN64 = Raw(b"\xcb\x7f\xf0\x00\x00\x00\x00\x00\x01")
OTHER = [None, True, False, b"bin", "str", [], {}, msgpack.ExtType(1, b"x"), Raw(b"\xc1"),
         SNAN32, SNAN64]
BAD_UTF8 = [Raw(b"\xa3\xed\xa0\x80"), Raw(b"\xa2\xc3\x28"), Raw(b"\xa1\xff")]  # surrogate, cut, 0xff


def strings(bound: int) -> list:
    """Strings at and around a bound of code points, ASCII and not."""
    out = ["", "e", "x" * bound, "x" * (bound + 1), "é" * bound, "é" * (bound + 1),
           "\U0001d11e" * bound, "\U0001d11e" * (bound + 1), "naïve-ünïcode", "\x00"]
    return out + BAD_UTF8


def loss_event(seq: int = 1, run: str = "r", **fields) -> dict:
    return {"v": 1, "type": "loss", "run": run, "seq": seq, "step": seq, "loss": 2.0 + 1.0 / (seq + 1), **fields}


def emitter_events(n: int, run: str = "gpt", first: int = 1, **extra) -> list[dict]:
    """Loss events as the emitter builds them (events.BUILDERS, Emitter._to_event)."""
    out = []
    for i in range(n):
        ev = BUILDERS["loss"](("loss", 1.7e9 + i, first + i, 2.5 + 1 / (i + 1), 3e-4, 0.7,
                               {"tokens": extra.get("tokens"), "rank": extra.get("rank")}))
        ev.update(v=wire.VERSION, run=run, emitter="a1b2c3d4e5f60718", seq=first + i)
        out.append(ev)
    return out


def ordinary_frames() -> list[bytes]:
    """Frames the emitter sends (Emitter._encode): one event, batches with and without base."""
    secret = "s" * 43
    frames = []
    for extra in ({}, {"tokens": 4096}, {"rank": 0}, {"tokens": 4096, "rank": 3}):
        evs = emitter_events(100, **extra)
        frames += [wire.encode({**evs[0], "auth": secret}), wire.encode(evs[1]),
                   wire.encode_batch(evs, "a1b2c3d4e5f60718", auth=secret),
                   wire.encode_batch(evs[:7], "a1b2c3d4e5f60718", base=1, auth=secret),
                   wire.encode_batch(evs[:1], "a1b2c3d4e5f60718")]
    bench = [{"v": 1, "type": "loss", "run": "b", "seq": i, "step": i, "loss": 2.0, "lr": 3e-4,
              "emitter": "b"} for i in range(1, 101)]
    frames += [wire.encode(bench[0]), wire.encode_batch(bench, "b", base=1)]
    return frames


def single_frames() -> list[bytes]:
    """Every combination of the optional fields, and each field given every hostile value."""
    frames = []
    values = {"lr": 3e-4, "grad_norm": 0.5, "tokens": 1e6, "rank": 2, "ts": 1.7e9, "emitter": "em", "auth": "sec"}
    for k in range(len(OPTIONAL) + 1):
        for names in itertools.combinations(OPTIONAL, k):
            frames.append(wire.encode(loss_event(**{n: values[n] for n in names})))
    hostile = {"v": INTS + FLOATS + OTHER + [F32(1.0), 1.0],
               "type": ["loss", "batch", "eval", "Loss", b"loss"] + OTHER,
               "run": strings(200) + OTHER, "emitter": strings(64) + OTHER, "auth": strings(128) + OTHER}
    for name in ("seq", "step", "rank", "loss", "lr", "grad_norm", "tokens", "ts"):
        hostile[name] = INTS + FLOATS + OTHER
    for name, vals in hostile.items():
        for val in vals:
            ev = loss_event(lr=3e-4, emitter="em")
            ev[name] = val
            frames.append(pack(ev))
            frames.append(pack(Pairs(list(ev.items())[::-1])))    # keys in another order
    base = loss_event(lr=3e-4)
    for extra in (("base", 1), ("extra", 1), ("events", []), ("metrics", {}), ("v", 1), ("loss", 1.0),
                  ("lr", 3e-4), ("run", "r"), ("emitter", "e"), ("emitter", "f")):   # unknown, or twice
        frames.append(pack(Pairs([*base.items(), extra])))
    frames += [wire.encode(base) + b"\x00", pack([base]), pack(Pairs(list(base.items())[:-1]))]
    return frames


def batch_frames(rng: random.Random) -> list[bytes]:
    frames = []
    good = emitter_events(5)
    for em, auth, base in itertools.product((None, "a1b2c3d4e5f60718", "other", "x" * 65, 1, b"e", None),
                                            (None, "s", "s" * 128, "s" * 129, 2, None),
                                            (None, 0, 5, INT64_MAX, 2**63, -1, 1.0, True, "5", None)):
        evs = [dict(e) for e in good]
        if rng.random() < 0.5:
            for e in evs:
                e.pop("emitter")
        if rng.random() < 0.3:
            for e in evs:
                e["auth"] = "own"
        obj = {"v": 1, "type": "batch", "events": evs}
        for name, val in (("emitter", em), ("auth", auth), ("base", base)):
            if val is not None:
                obj[name] = val
        frames.append(pack(obj))
    for name, other in (("run", "q"), ("emitter", "f"), ("auth", "t"), ("run", "r"), ("emitter", "e")):
        for pos in range(3):     # one event's run, emitter or secret another of the same size
            evs = [loss_event(s, lr=3e-4, emitter="e", auth="s") for s in (1, 2, 3)]
            evs[pos][name] = other
            frames.append(pack({"v": 1, "type": "batch", "events": evs, "emitter": "g", "auth": "u"}))
    hostile = INTS + FLOATS + OTHER + strings(64)
    for _ in range(1500):
        evs = [loss_event(s, lr=3e-4, emitter="e") for s in range(1, rng.randrange(1, 5))]
        for _ in range(rng.choice((0, 1, 2))):
            ev, name = rng.choice(evs + [{}]), rng.choice(("v", "type", "run", "seq", "step", "loss", "lr",
                                                           "grad_norm", "tokens", "rank", "ts", "emitter",
                                                           "auth", "base", "x"))
            if rng.random() < 0.25:
                ev.pop(name, None)
            else:
                ev[name] = rng.choice(hostile + ["r", "q", "f"])
        obj = Pairs([("v", rng.choice((1, 1, 1, True, 1.0, 2))), ("type", rng.choice(("batch",) * 5 + ("loss",))),
                     ("events", evs)])
        for name in ("emitter", "auth", "base", "x"):
            if rng.random() < 0.3:
                obj.append((name, rng.choice(hostile + ["e", 3])))
        if rng.random() < 0.1:
            obj.append(rng.choice(obj))                  # a key twice
        rng.shuffle(obj)
        frames.append(pack(obj, rng))
    return frames


# ---- the tests ---------------------------------------------------------------------------------

def test_it_takes_the_frames_the_emitter_sends(decode):
    for frame in ordinary_frames():
        assert agrees(decode, frame), frame


def test_single_events_agree_or_are_declined(decode):
    frames = single_frames()
    taken = sum(agrees(decode, f) for f in frames)
    assert taken > 2**len(OPTIONAL) and len(frames) - taken > 300   # both outcomes exercised


def test_non_minimal_headers_read_as_msgpack_reads_them(decode):
    rng = random.Random(31)
    evs = [loss_event(s, run="ünï", lr=F32(3e-4), grad_norm=2**64 - 1, tokens=-5, rank=INT64_MAX,
                      ts=-1.5, emitter="é" * 64, auth="s" * 128) for s in (0, 1, INT64_MAX)]
    for _ in range(300):
        assert agrees(decode, pack(rng.choice(evs), rng))
        assert agrees(decode, pack({"v": 1, "type": "batch", "events": evs, "base": INT64_MAX,
                                    "emitter": "x" * 64, "auth": ""}, rng))


def test_batches_agree_or_are_declined(decode):
    frames = batch_frames(random.Random(25))
    taken = sum(agrees(decode, f) for f in frames)
    assert 100 < taken < len(frames) - 100


def test_batches_of_several_runs_emitters_or_secrets_are_declined(decode):
    a, b = emitter_events(3), emitter_events(3, run="other", first=4)
    assert decode(wire.encode_batch(a + b, "e"), NO_LR) is None
    mixed = [dict(e, emitter=f"em{i % 2}") for i, e in enumerate(a)]
    assert decode(wire.encode_batch(mixed, "e"), NO_LR) is None
    secrets = [dict(e, auth=f"s{i % 2}") for i, e in enumerate(a)]
    assert decode(wire.encode_batch(secrets, "e"), NO_LR) is None
    shapes = [dict(e, tokens=1.0) if i else e for i, e in enumerate(a)]
    assert decode(wire.encode_batch(shapes, "e"), NO_LR) is None
    too_many = [loss_event(s) for s in range(1, wire.MAX_BATCH_EVENTS + 2)]
    assert decode(wire.encode_batch(too_many), NO_LR) is None
    assert agrees(decode, wire.encode_batch(too_many[:-1]))
    assert decode(wire.encode_batch([]), NO_LR) is None


def test_what_it_is_not_sure_of_is_declined(decode):
    """Frames today's path may accept, that the decoder leaves to it."""
    ev = loss_event(lr=3e-4)
    pairs = list(ev.items())
    batch = [("v", 1), ("type", "batch"), ("events", [ev])]
    for frame in (pack(Pairs([*pairs, ("loss", 1.0)])), pack(Pairs([("loss", 1.0), *pairs])),   # a key twice
                  pack(Pairs([*pairs, ("v", 1)])), pack(Pairs([*batch, ("base", 1), ("base", 2)])),
                  pack(Pairs([*batch, ("events", [ev])])),
                  pack({"v": 1, "type": "batch", "events": [Pairs([*pairs, ("seq", 1)])]}),
                  pack(dict(ev, v=True)), pack(dict(ev, v=1.0)), pack(dict(ev, v=F32(1.0))),   # v not the int 1
                  pack({"v": True, "type": "batch", "events": [ev]}),
                  pack(dict(ev, run=b"r")), pack(dict(ev, emitter=b"e")), pack(Pairs([(b"v", 1), *pairs[1:]])),
                  pack(dict(ev, extra=1)), pack(dict(ev, base=1)), pack(dict(ev, ts=None)),  # not a loss field
                  pack({"v": 1, "type": "batch", "events": [ev], "x": 1}),
                  pack({"v": 1, "type": "batch", "events": [dict(ev, base=1)]}),
                  pack({"v": 1, "type": "batch", "events": [ev], "base": -1}),     # base not an int64 >= 0
                  pack({"v": 1, "type": "batch", "events": [ev], "base": 2**63}),
                  pack({"v": 1, "type": "batch", "events": [ev], "base": 1.0}),
                  pack({"v": 1, "type": "batch", "events": [ev], "base": None}),
                  pack({"v": 1, "type": "batch", "events": [ev], "emitter": "x" * 65}),
                  pack(dict(ev, lr=msgpack.ExtType(1, b"x"))), wire.encode(ev) + b"\xc0",
                  pack(dict(ev, run=BAD_UTF8[0])), pack(dict(ev, emitter=None))):
        assert decode(frame, NO_LR) is None, frame
    assert agrees(decode, pack(ev))


def test_truncations_and_byte_flips_agree_or_are_declined(decode):
    rng = random.Random(7)
    valid = ordinary_frames()[:6] + [wire.encode(loss_event(lr=3e-4, emitter="é", auth="s"))]
    valid = [f for f in valid if len(f) < 4000]
    for frame in valid:
        for cut in range(len(frame)):
            assert not agrees(decode, frame[:cut])
        flips = 300 if decode is not PURE else 60
        for _ in range(flips):
            b = bytearray(frame)
            for _ in range(rng.choice((1, 1, 2, 3))):
                b[rng.randrange(len(b))] = rng.randrange(256)
            agrees(decode, bytes(b))


def test_lengths_larger_than_the_frame_are_declined(decode):
    for frame in (b"\xdf\xff\xff\xff\xff", b"\x81\xdb\xff\xff\xff\xff", b"\x81\xa6events\xdd\xff\xff\xff\xff",
                  b"\x83\xa1v\x01\xa4type\xa5batch\xa6events\xdc\x27\x11" + b"\x80" * 10, b"", b"\x80",
                  b"\x81\xa1v\xcf\xff", b"\x81\xa1v\xcb\x00"):
        assert decode(frame, NO_LR) is None


def test_float32_widens_as_msgpack_widens_it(decode):
    for bits in (0x7f800001, 0xff800001, 0x7fc00000, 0x7fbfffff, 0x00000001, 0x80000000, 0x3eaaaaab):
        raw = Raw(b"\xca" + bits.to_bytes(4, "big"))
        assert agrees(decode, pack(loss_event(lr=raw, grad_norm=raw)))
        assert agrees(decode, pack(loss_event(loss=Raw(b"\xcb" + (bits << 32 | bits).to_bytes(8, "big")))))


# ---- through a real daemon --------------------------------------------------------------------

def _traffic() -> tuple[list[bytes], int]:
    """A run's frames as a trainer sends them, and how many of them the decoder cannot take
    (the run's first frame, before it is live; a batch of mixed kinds; garbage)."""
    evs = emitter_events(1200)
    for i, ev in enumerate(evs):    # a spike the detectors page on
        ev["loss"] = 2.6 + 9 * (i + 1) ** -0.35 + (4.0 if i == 700 else 0.0)
    em, secret = "a1b2c3d4e5f60718", "s" * 43
    frames = [wire.encode({**evs[0], "auth": secret})] + [wire.encode({**ev, "auth": secret}) for ev in evs[1:200]]
    frames += [wire.encode_batch(evs[i:i + 100], em, base=i + 1, auth=secret) for i in range(200, 800, 100)]
    frames += [wire.encode_batch(evs[300:400], em, base=301, auth=secret),          # a re-send
               wire.encode_batch(evs[900:1000], em, base=801, auth=secret),         # a gap still held
               wire.encode_batch(evs[800:900], em, base=801, auth=secret),
               wire.encode_batch(evs[900:950], em, base=801, auth="not-the-secret"),  # not the owner
               wire.encode_batch(evs[900:1000], em, base=801, auth=secret)]
    mixed = evs[1000:1050] + [{"v": 1, "type": "heartbeat", "run": "gpt", "seq": 1051, "emitter": em}]
    frames += [wire.encode_batch(mixed, em, base=801, auth=secret), b"\x93garbage"]
    frames += [wire.encode({**ev, "auth": secret}) for ev in evs[1051:1200]]
    return frames, 3


def test_a_daemon_with_the_decoder_ends_as_one_without(decode, tmp_path, monkeypatch):
    frames, general = _traffic()
    calls = [0]
    decode_frame = wire.decode_frame

    def counted(*args, **kw):
        calls[0] += 1
        return decode_frame(*args, **kw)

    monkeypatch.setattr(wire, "decode_frame", counted)
    without = asyncio.run(fed_state(tmp_path, "general", frames, "gpt", fast=None))
    assert calls[0] == len(frames)
    calls[0] = 0
    with_it = asyncio.run(fed_state(tmp_path, "fast", frames, "gpt", fast=decode))
    assert calls[0] == general                     # every other frame went from its bytes to the body
    assert with_it["alerts"] and with_it["dropped"]
    for key in without:
        assert msgpack.packb(with_it[key]) == msgpack.packb(without[key]), key
    assert without["events"] == 1200 and without["received"] == {"loss": 1449, "heartbeat": 1}
    assert without["dropped"] == {"duplicate": 100, "out_of_order": 100, "not_owner": 50}


def test_a_scalar_event_is_left_to_the_general_checks(decode):
    """A ``scalar`` event (emit.scalar), alone or in a batch of losses, is declined by the
    decoder and by the fast checks; the general checks take it and the losses beside it."""
    losses = emitter_events(3)
    sc = BUILDERS["scalar"](("scalar", 1.7e9, 2, "train/grad_scale", 1024.0))
    sc.update(v=wire.VERSION, run="gpt", emitter="a1b2c3d4e5f60718", seq=4)
    assert not plain_loss(sc)
    assert decode(wire.encode(sc), NO_LR) is None
    frame = wire.encode_batch([*losses, sc], "a1b2c3d4e5f60718")
    assert decode(frame, NO_LR) is None
    events, rejects, batch = wire.decode_frame(frame)
    assert rejects == [] and batch.columns is None
    assert [e["type"] for e in events] == ["loss"] * 3 + ["scalar"]
    assert _item(events[-1])[1] is events[-1]           # the body takes it whole
