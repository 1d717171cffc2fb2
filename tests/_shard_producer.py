"""One trainer process for the sharding tests: each run it is given goes out twice, to the
shards (an endpoint list) and to a single daemon, the same events in the same order.

    python tests/_shard_producer.py SHARDS SINGLE SECRET_DIR RUN...

SHARDS is the endpoint list as a trainer would set WTWIN_ENDPOINT. The curve a run gets
is chosen by its name's prefix (drift, nan, spike, diverge, healthy), seeded by its name
(a fixed seed: not Python's salted hash). Waits for every event to be acked, closes,
then prints one JSON line: {run: the endpoint this process picked for it}.
"""

from __future__ import annotations

import json
import math
import random
import sys
import zlib

from wtwin.emitters import connect

STEPS = 1200


def loss_at(run: str, step: int, rng: random.Random) -> float:
    base = 2.0 + 6.0 * (step + 50) ** -0.4 + rng.gauss(0, 0.01)
    kind = run.split("-", 1)[0]
    if kind == "drift" and step > 600:
        return base + 0.0006 * (step - 600)
    if kind == "nan" and step in (700, 701):
        return math.nan
    if kind == "spike" and step in (400, 900):
        return base + 2.0
    if kind == "diverge" and step > 800:
        return base * math.exp(0.01 * (step - 800))
    return base


def main(argv: list[str]) -> int:
    sharded, single, secret_dir, *runs = argv
    pairs = {r: (connect(sharded, r, secret_dir=secret_dir), connect(single, r, secret_dir=secret_dir))
             for r in runs}
    rngs = {r: random.Random(zlib.crc32(r.encode())) for r in runs}
    for step in range(1, STEPS + 1):
        for run, emitters in pairs.items():
            loss = loss_at(run, step, rngs[run])
            for e in emitters:
                e.loss(step, loss, lr=3e-4)
    ok = all(e.flush(60) for pair in pairs.values() for e in pair)
    for pair in pairs.values():
        for e in pair:
            e.close("completed", timeout=10)
    print(json.dumps({r: pair[0].endpoint for r, pair in pairs.items()}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
