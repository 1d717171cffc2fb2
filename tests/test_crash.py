"""SIGKILL the daemon at random points while 8 trainers stream 200k events.

Real processes throughout: one wtwind, eight emitter processes (tests/_crash_emitter.py,
each a seeded curve with an injected failure), a local HTTP receiver behind the
webhook sink that answers 500 to every third request. The daemon is killed three
times at seeded random moments and restarted on the same store. The alert
transitions it journaled, as a multiset of (run, kind, status, step), must equal
those of an uninterrupted daemon fed the same events; every one of them must reach
the receiver at least once, and repeats carry the same webhook-id (idempotency key).
"""

from __future__ import annotations

import collections
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, Daemon, wait_for
from http_recorder import Reply, ThreadedRecorder

EMITTERS = 8
PER_RUN = 25_000  # 8 x 25k = 200k events
RATE = 2_500      # events/s per emitter: the stream outlasts the kills
KILLS = 3
SEED = 20261202


def config(tmp: Path, hook_url: str) -> Path:
    path = tmp / "wtwind.toml"
    path.write_text(f"""
[detection]
cooldown_s = 0.0
stall_after_s = 3600.0

[state]
flush_interval_s = 0.2

[delivery.retry]
base_s = 0.05
cap_s = 0.5
max_attempts = 30

[[sinks]]
type = "webhook"
name = "hook"
url = "{hook_url}"

[[routes]]          # every journaled transition, info too (sinks get warning+ by default)
sinks = ["hook"]
severities = ["info", "warning", "critical"]
""")
    return path


def start_emitters(endpoint: str) -> list[subprocess.Popen]:
    script = str(REPO / "tests" / "_crash_emitter.py")
    return [subprocess.Popen([sys.executable, script, endpoint, f"crash-{i}", str(i), str(PER_RUN), str(RATE)],
                             stdout=subprocess.PIPE, text=True) for i in range(EMITTERS)]


def finish(procs) -> list[dict]:
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=240)
        assert p.returncode == 0, stdout
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def journal(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT key, run, kind, status, step FROM alerts").fetchall()


def hook_ids(rec: ThreadedRecorder) -> collections.Counter:
    return collections.Counter(r.headers.get("webhook-id") for r in rec.requests("/hook"))


def one_pass(tmp: Path, kills: list[float]) -> tuple[list[tuple], ThreadedRecorder, list[dict]]:
    tmp.mkdir()
    script = [Reply(500) if i % 3 == 0 else Reply(200) for i in range(3000)]
    rec = ThreadedRecorder(script=script)
    d = Daemon(args=("--config", str(config(tmp, rec.base + "/hook"))), tmpdir=str(tmp)).start()
    try:
        procs = start_emitters(d.tcp)
        t0 = time.monotonic()
        for at in kills:
            wait_for(lambda: time.monotonic() - t0 >= at, timeout=at + 5, what="kill time")
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait()
            d._log.close()
            d.start()
        stats = finish(procs)
        db = tmp / "wtwind.db"
        wait_for(lambda: {k for k, *_ in journal(db)} <= set(hook_ids(rec)), timeout=60,
                 what="every journaled alert at the receiver")
        assert d.stop() == 0
        return journal(db), rec, stats
    finally:
        d.kill()


@pytest.mark.slow  # about a minute or two on 2 cores
@pytest.mark.timeout(600)
def test_sigkill_at_random_points_gives_the_same_alerts_delivered_at_least_once(tmp_path):
    rng = random.Random(SEED)
    kills = sorted(rng.uniform(2.0, 0.8 * PER_RUN / RATE) for _ in range(KILLS))
    reference, ref_rec, _ = one_pass(tmp_path / "clean", [])
    crashed, rec, stats = one_pass(tmp_path / "crashed", kills)
    ref_rec.close()
    rec.close()

    shape = lambda rows: collections.Counter(r[1:] for r in rows)  # noqa: E731
    assert shape(reference), "the injected failures raised no alerts at all"
    assert {r[2] for r in reference} >= {"nonfinite"}
    assert shape(crashed) == shape(reference), stats
    assert all(s["acked_all"] and s["dropped"] == 0 and s.get("resend_evicted", 0) == 0 for s in stats), stats
    ids = hook_ids(rec)
    keys = [k for k, *_ in crashed]
    assert len(set(keys)) == len(keys)  # one idempotency key per transition, never two
    assert set(keys) <= set(ids)        # every alert delivered at least once
    assert any(n > 1 for n in ids.values()), "the injected 500s caused no re-delivery to dedupe"
