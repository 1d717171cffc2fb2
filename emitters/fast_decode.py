"""From msgpack bytes straight to the values of plain loss events: the daemon's reading of
the frames that make up nearly all traffic, without building a dict per event.

``loss_frame(frame, no_lr)`` reads a frame that is one plain loss event, or a batch
(``{"v": 1, "type": "batch", "events": [...], "emitter"?, "auth"?, "base"?}``) of
1..``wire.MAX_BATCH_EVENTS`` plain loss events with the same fields, of one run, emitter
and secret (the batch's inherited). It returns ``(run, emitter, auth, base, items)``
(None where there is none; ``base`` None for a single event), ``items`` the tuple the
ingest body takes per loss: ``(seq, None, step, loss, lr, grad_norm, tokens, ts)``, with
``no_lr`` for a missing ``lr``.

For anything it is not sure of (a key twice or not a loss event's, ``v`` not the integer
1, bin, ext or nil values, a ``base`` not in 0..INT64_MAX, a batch's own emitter or auth
out of bounds, bytes after the frame, invalid UTF-8, events of several shapes, runs,
emitters or secrets) it returns None, and the caller takes ``wire.decode_frame``, which
judges the frame. Where it accepts, ``wire.decode_frame`` accepts every event and gives
these values, of the same Python types (a float32 widened as C widens it, strict UTF-8,
lengths in code points), within the bounds of ``fast_checks``/``bounds``
(``tests/test_fast_decode.py`` holds it to that).

Every byte is hostile: each length read is checked against the bytes left before use,
nothing is allocated by a length the frame gives (a batch's items grow one event at a
time), and the frame is read in one flat pass: no recursion. One source for both builds
(Cython's pure-Python mode, fast_decode.pxd): compiled, the frame is read through a C
pointer and the numbers in C; pure, by indexing the bytes, slower than msgpack (the
daemon uses it compiled only).
"""

from __future__ import annotations

import struct

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from . import frame_keys as _keys
from .bounds import INT64_MAX, MAX_AUTH_LEN, MAX_EMITTER_LEN, MAX_RUN_LEN, VERSION
from .frame_keys import key_bit
from .wire import MAX_BATCH_EVENTS

# the bounds, as C values in the compiled build (fast_decode.pxd)
I64_MAX, RUN_MAX, EMITTER_MAX, AUTH_MAX = INT64_MAX, MAX_RUN_LEN, MAX_EMITTER_LEN, MAX_AUTH_LEN
BATCH_MAX, V1 = MAX_BATCH_EVENTS, VERSION

# the keys' bits and masks, and which key a name is: frame_keys.py (from schema.py)
(V, TYPE, RUN, SEQ, STEP, LOSS, LR, GRAD_NORM, TOKENS, RANK, TS, EMITTER, AUTH, EVENTS,
 BASE) = _keys.BITS
REQUIRED, EVENT_KEYS = _keys.REQUIRED, _keys.EVENT_KEYS
BATCH_REQUIRED, BATCH_KEYS = _keys.BATCH_REQUIRED, _keys.BATCH_KEYS
FEWEST_KEYS, MOST_KEYS = _keys.FEWEST_KEYS, _keys.MOST_KEYS

# what a scalar read is (``_Frame.scalar``; 0: anything else, or cut short): an integer
# in 0..2**64-1 (``u``), a negative integer (``neg``), a float (``d``), a str (``size``
# bytes at ``at``)
INT, NEG, FLOAT, STR = 1, 2, 3, 4
KIND_LOSS, KIND_BATCH = 1, 2   # ``type``'s value


class _Frame:
    """A frame read front to back: the scalar read last, and the fields of the event read
    last (one event, or each event of a batch in turn)."""

    def start(self, frame: bytes) -> None:
        self.frame = frame
        self.buf = frame
        self.pos = 0
        self.end = len(frame)
        self.at = self.size = 0
        self.u = self.seq = self.step = self.base = 0
        self.d = 0.0
        self.neg = self.loss = self.lr = self.grad_norm = self.tokens = self.em = self.auth = None
        self.ts = None
        self.kind = 0
        self.mask = 0
        self.run_at = self.run_size = self.em_at = self.em_size = self.auth_at = self.auth_size = 0

    def be(self, p: int, n: int) -> int:
        """The ``n`` bytes at ``p`` (bounds checked by the caller) as a big-endian unsigned integer."""
        v = 0
        for i in range(n):
            v = (v << 8) | self.buf[p + i]
        return v

    def header(self, fix: int, fix_mask: int, first: int) -> int:
        """The count of a map or array header (``fix``: its fix form, ``fix_mask`` the bits
        of the count there; ``first``: its 16-bit form, ``first + 1`` its 32-bit one), or
        -1 for any other value or a header cut short."""
        p = self.pos
        if p >= self.end:
            return -1
        b = self.buf[p]
        p += 1
        if b & ~fix_mask == fix:
            self.pos = p
            return b & fix_mask
        if b == first or b == first + 1:
            w = 2 if b == first else 4
            if self.end - p < w:
                return -1
            self.pos = p + w
            return self.be(p, w)
        return -1

    def scalar(self) -> int:
        """Reads the next value when it is an integer, a float or a str, and says which
        (INT, NEG, FLOAT, STR); 0 for anything else (nil, bools, bin, ext, a map or an
        array) or a value cut short."""
        p, end = self.pos, self.end
        if p >= end:
            return 0
        b = self.buf[p]
        p += 1
        if b < 0x80:                    # positive fixint
            self.u = b
            self.pos = p
            return INT
        if b >= 0xe0:                   # negative fixint
            self.neg = b - 0x100
            self.pos = p
            return NEG
        if 0xa0 <= b <= 0xbf or 0xd9 <= b <= 0xdb:   # fixstr, str 8/16/32
            if b <= 0xbf:
                n = b & 0x1f
            else:
                w = 1 << (b - 0xd9)
                if end - p < w:
                    return 0
                n = self.be(p, w)
                p += w
            if n > end - p:
                return 0
            self.at, self.size = p, n
            self.pos = p + n
            return STR
        if 0xcc <= b <= 0xd3:           # uint 8..64, int 8..64
            w = 1 << ((b - 0xcc) & 3)
            if end - p < w:
                return 0
            self.pos = p + w
            if b >= 0xd0 and self.buf[p] >= 0x80:    # a negative signed integer
                self.neg = int.from_bytes(self.frame[p:p + w], "big", signed=True)
                return NEG
            self.u = self.be(p, w)
            return INT
        if b == 0xcb or b == 0xca:      # float 64, float 32
            w = 8 if b == 0xcb else 4
            if end - p < w:
                return 0
            self.d = self.real(p, w == 8)
            self.pos = p + w
            return FLOAT
        return 0

    def real(self, p: int, wide: bool) -> float:
        """The float64 (``wide``) or float32 at ``p`` (bounds checked by the caller), a
        float32 widened as C (and msgpack) widens it."""
        if cython.compiled:
            if wide:
                bits = self.be(p, 8)
                memcpy(cython.address(d), cython.address(bits), 8)   # noqa: F821
                return d                                              # noqa: F821
            bits32 = self.be(p, 4)
            memcpy(cython.address(f), cython.address(bits32), 4)      # noqa: F821
            return f                                                  # noqa: F821
        if wide:
            return struct.unpack_from(">d", self.frame, p)[0]
        return _widened(self.be(p, 4), struct.unpack_from(">f", self.frame, p)[0])

    def key(self) -> int:
        """The bit of the next key when it is a str naming a field of a loss event or of a
        batch (``frame_keys.key_bit``); 0 for any other key."""
        if self.scalar() != STR:
            return 0
        n, p = self.size, self.at
        if n == 0 or n > 9:
            return 0
        return key_bit(n, self.be(p, n if n < 8 else 8), self.buf[p + 8] if n == 9 else 0)

    def value(self, k: int) -> bool:
        """Reads the value of key ``k`` (any but ``events``) into this event's fields (or
        the frame's: ``kind``, ``base``); False where a plain loss event (or a batch)
        cannot have it."""
        kind = self.scalar()
        if k == SEQ or k == STEP or k == V or k == RANK or k == BASE:
            if kind != INT or self.u > I64_MAX:
                return False
            if k == SEQ:
                self.seq = self.u
            elif k == STEP:
                self.step = self.u
            elif k == V:
                return self.u == V1
            elif k == BASE:
                self.base = self.u
            return True
        if k == RUN or k == EMITTER or k == AUTH or k == TYPE:
            if kind != STR:
                return False
            if k == RUN:
                self.run_at, self.run_size = self.at, self.size
            elif k == EMITTER:
                self.em_at, self.em_size = self.at, self.size
            elif k == AUTH:
                self.auth_at, self.auth_size = self.at, self.size
            elif self.size == 4 and self.be(self.at, 4) == 0x6c6f7373:       # "loss"
                self.kind = KIND_LOSS
            elif self.size == 5 and self.be(self.at, 5) == 0x6261746368:     # "batch"
                self.kind = KIND_BATCH
            else:
                return False
            return True
        # the numbers: loss, lr, grad_norm, tokens, ts
        if kind == INT:
            num = self.u
        elif kind == FLOAT:
            if k == LR and self.d < 0.0:      # NaN passes (an unknown lr), as the checks let it
                return False
            num = self.d
        elif kind == NEG and k != LR:
            num = self.neg
        else:
            return False
        if k == LOSS:
            self.loss = num
        elif k == LR:
            self.lr = num
        elif k == GRAD_NORM:
            self.grad_norm = num
        elif k == TOKENS:
            self.tokens = num
        elif k == TS:
            self.ts = num
        return True

    def event(self) -> bool:
        """Reads one event into this event's fields (``mask``: its keys); False unless it
        is a plain loss event, each key once."""
        count = self.header(0x80, 0x0f, 0xde)
        if count < 6 or count > 13:         # more keys than a loss event has: one twice, or unknown
            return False
        mask = 0
        self.kind = 0
        for _ in range(count):
            k = self.key()
            if k & EVENT_KEYS == 0 or k & mask:
                return False
            mask |= k
            if not self.value(k):
                return False
        self.mask = mask
        return mask & REQUIRED == REQUIRED and self.kind == KIND_LOSS

    def same(self, a: int, b: int, n: int) -> bool:
        """The ``n`` bytes at ``a`` and at ``b`` are the same."""
        if cython.compiled:
            same = memcmp(self.buf + a, self.buf + b, n) == 0        # noqa: F821
        else:
            same = self.frame[a:a + n] == self.frame[b:b + n]
        return same

    def named(self, mask: int, em_at: int, em_size: int, auth_at: int, auth_size: int) -> bool:
        """The emitter and the secret at those places, where ``mask`` has them, decoded into
        ``em`` and ``auth``; False where one is not text within its bounds."""
        if mask & EMITTER:
            self.em = self.text(em_at, em_size, 0, EMITTER_MAX)
            if self.em is None:
                return False
        if mask & AUTH:
            self.auth = self.text(auth_at, auth_size, 0, AUTH_MAX)
            if self.auth is None:
                return False
        return True

    def text(self, at: int, size: int, shortest: int, longest: int):
        """The str of ``size`` bytes at ``at`` (strict UTF-8, as msgpack decodes it) when
        it has ``shortest``..``longest`` code points; else None."""
        if size > 4 * longest:              # a code point is at most 4 bytes
            return None
        try:
            s = self.frame[at:at + size].decode("utf-8")
        except UnicodeDecodeError:
            return None
        n = len(s)
        return s if shortest <= n <= longest else None


def _widened(bits: int, value: float) -> float:
    """A float32 as a double, the way C converts it (the pure build): ``value`` (struct's),
    except that a NaN keeps its payload and is made quiet as C's conversion makes it."""
    if bits & 0x7f800000 != 0x7f800000 or bits & 0x7fffff == 0:
        return value
    wide = (bits >> 31) << 63 | 0x7ff8 << 48 | (bits & 0x7fffff) << 29
    return struct.unpack(">d", wide.to_bytes(8, "big"))[0]


def loss_frame(frame, no_lr):
    """``(run, emitter, auth, base, items)`` for a frame of plain loss events this is sure
    of (the module's docstring), else None."""
    if type(frame) is not bytes:
        return None
    r = _Frame.__new__(_Frame)
    r.start(frame)
    count = r.header(0x80, 0x0f, 0xde)
    if count < FEWEST_KEYS or count > MOST_KEYS:
        return None
    mask = kind = ev_mask = 0
    em_at = em_size = auth_at = auth_size = run_at = run_size = 0
    ev_em_at = ev_em_size = ev_auth_at = ev_auth_size = 0
    items = None
    for _ in range(count):
        k = r.key()
        if k == 0 or k & mask:
            return None
        mask |= k
        if k == EVENTS:
            items = _events(r, no_lr)
            if items is None:
                return None
            # the first event's keys, run, emitter and secret are every event's
            ev_mask, run_at, run_size = r.mask, r.run_at, r.run_size
            ev_em_at, ev_em_size, ev_auth_at, ev_auth_size = r.em_at, r.em_size, r.auth_at, r.auth_size
            continue
        if not r.value(k):
            return None
        if k == TYPE:
            kind = r.kind
        elif k == EMITTER:
            em_at, em_size = r.em_at, r.em_size
        elif k == AUTH:
            auth_at, auth_size = r.auth_at, r.auth_size
    if r.pos != r.end:                      # bytes after the frame: msgpack refuses it
        return None
    if not r.named(mask, em_at, em_size, auth_at, auth_size):
        return None
    if kind == KIND_LOSS:
        if mask & ~EVENT_KEYS or mask & REQUIRED != REQUIRED:
            return None
        run = r.text(r.run_at, r.run_size, 1, RUN_MAX)
        if run is None:
            return None
        item = (r.seq, None, r.step, r.loss, r.lr if mask & LR else no_lr,
                r.grad_norm if mask & GRAD_NORM else None, r.tokens if mask & TOKENS else None,
                r.ts if mask & TS else None)
        return (run, r.em, r.auth, None, (item,))
    if kind != KIND_BATCH or mask & ~BATCH_KEYS or mask & BATCH_REQUIRED != BATCH_REQUIRED:
        return None
    run = r.text(run_at, run_size, 1, RUN_MAX)
    if run is None:
        return None
    # the events' own emitter and secret, where they have them: the batch's are not inherited
    if not r.named(ev_mask, ev_em_at, ev_em_size, ev_auth_at, ev_auth_size):
        return None
    return (run, r.em, r.auth, r.base if mask & BASE else None, items)


def _events(r: _Frame, no_lr):
    """A batch's events, read one at a time: their items, when each is a plain loss event
    with the first's keys, run, emitter and secret (the first's left in ``r``'s fields:
    ``mask``, ``run_at``...); else None."""
    n = r.header(0x90, 0x0f, 0xdc)
    if n < 1 or n > BATCH_MAX or n > r.end - r.pos:     # each event is a byte at least
        return None
    items = []
    if not r.event():
        return None
    mask = r.mask
    run_at, run_size = r.run_at, r.run_size
    em_at, em_size = r.em_at, r.em_size
    auth_at, auth_size = r.auth_at, r.auth_size
    has_lr, has_gn, has_tokens, has_ts = mask & LR, mask & GRAD_NORM, mask & TOKENS, mask & TS
    for i in range(n):
        if i:
            if (not r.event() or r.mask != mask or r.run_size != run_size
                    or not r.same(r.run_at, run_at, run_size)):
                return None
            if mask & EMITTER and (r.em_size != em_size or not r.same(r.em_at, em_at, em_size)):
                return None
            if mask & AUTH and (r.auth_size != auth_size or not r.same(r.auth_at, auth_at, auth_size)):
                return None
        items.append((r.seq, None, r.step, r.loss, r.lr if has_lr else no_lr,
                      r.grad_norm if has_gn else None, r.tokens if has_tokens else None,
                      r.ts if has_ts else None))
    r.run_at, r.run_size = run_at, run_size
    r.em_at, r.em_size = em_at, em_size
    r.auth_at, r.auth_size = auth_at, auth_size
    return items
