"""One trainer for the crash tests: streams a seeded curve with an injected failure.

    python tests/_crash_emitter.py ENDPOINT RUN SEED N RATE

Kinds of failure by seed % 4: slow drift, a non-finite loss, a divergence, none.
Paced at RATE events/s (0: as fast as possible). Waits until every event is acked,
then prints the emitter's stats as one JSON line.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time

from wtwin.emitters.emitter import Emitter


def loss_at(step: int, rng: random.Random, kind: int, n: int) -> float:
    base = 2.0 + 6.0 * (step + 50) ** -0.4 + rng.gauss(0, 0.02)
    onset = n // 2
    if kind == 0 and step > onset:
        return base + 0.0004 * (step - onset)
    if kind == 1 and step == onset:
        return math.nan
    if kind == 2 and step > onset:
        return base * math.exp(0.002 * (step - onset))
    return base


def main() -> int:
    endpoint, run, seed, n, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    rng = random.Random(seed)
    emit = Emitter(endpoint, run=run, heartbeat_s=3600, resend_size=50_000, queue_size=50_000,
                   ack_timeout_s=2.0)
    t0 = time.monotonic()
    for step in range(1, n + 1):
        emit.loss(step, loss_at(step, rng, seed % 4, n))
        if rate and step % 100 == 0:
            ahead = step / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    ok = emit.flush(180)
    emit.close(timeout=10)  # run_end: waits for its ack too
    stats = emit.stats
    print(json.dumps({"run": run, "acked_all": ok, **stats}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
