"""A longer fuzz campaign for the loss-frame decoder than the suite runs (by hand, not
collected by pytest): mutated frames fed to the compiled ``fast_decode.loss_frame``, each
either declined or read exactly as ``wire.decode_frame`` reads it
(``test_fast_decode.agrees``). The seeds are the suite's frames (the emitter's, single
events with every field form, batches); each mutation is 1-5 of: a byte changed, bytes
deleted or inserted, a msgpack type byte written, the tail of another frame spliced in,
a region repeated.

    .venv/bin/python tests/fuzz_fast_decode.py [--seed 1] [--seconds 300]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_fast_decode as T  # noqa: E402
from wtwin.emitters import fast_decode  # noqa: E402

TYPE_BYTES = (0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd3, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
              0xca, 0xcb, 0xc0, 0xc2, 0xc3, 0xff, 0x80, 0x90, 0xa0)


def mutate(frame: bytes, seeds: list[bytes], rng: random.Random) -> bytes:
    f = bytearray(frame)
    for _ in range(rng.choice((1, 1, 2, 3, 5))):
        if not f:
            break
        i, op = rng.randrange(len(f)), rng.randrange(6)
        if op == 0:
            f[i] = rng.randrange(256)
        elif op == 1:
            del f[i:i + rng.randrange(1, 9)]
        elif op == 2:
            f[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op == 3:
            f[i] = rng.choice(TYPE_BYTES)
        elif op == 4:
            other = rng.choice(seeds)
            f[i:] = other[rng.randrange(len(other)):]
        else:
            j = rng.randrange(len(f))
            f[i:i] = f[j:j + rng.randrange(1, 32)]
    return bytes(f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=300.0)
    args = ap.parse_args()
    if not fast_decode.__file__.endswith(".so"):
        print("the decoder is not compiled here (make install): nothing to fuzz", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    seeds = [f for f in T.ordinary_frames() + T.single_frames() + T.batch_frames(random.Random(3))
             if len(f) < 20_000]
    decode, end = fast_decode.loss_frame, time.monotonic() + args.seconds
    n = accepted = 0
    while time.monotonic() < end:
        accepted += T.agrees(decode, mutate(rng.choice(seeds), seeds, rng))  # raises on a disagreement
        n += 1
    print(f"{n} mutated frames from {len(seeds)} seeds: {accepted} read as wire.decode_frame reads "
          "them, the rest declined; none disagreed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
