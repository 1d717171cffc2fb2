"""A time per point (the page's relative-time and wall-time axes): the loss series keep
each event's ``ts``, live and in the store (seconds since the run's first, float32, plus
its ``t0``), and a history stored before times were kept still reads, its times null. A
real wtwind, restarted on the same store; real emitters."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
from helpers import Daemon, run_at

from wtwin.daemon.store import envelope
from wtwin.emitters import connect

GONE = {"WTWIND_RUNS__ENDED_TTL_S": "0", "WTWIND_RUNS__ENDED_SERIES_S": "0"}


def feed(d, run: str, steps: int) -> tuple[float, float]:
    t0 = time.time()
    e = connect(d.ipc, run=run)
    for t in range(1, steps + 1):
        e.loss(t, 3.0 - t / steps)
    e.close("completed")
    return t0, time.time()


def make_old(path, run: str) -> None:
    """Rewrite ``run``'s stored loss history as an older wtwind wrote it: no time field."""
    db = sqlite3.connect(path)
    with db:
        for rid, blob in db.execute("SELECT id, data FROM series WHERE run = ? AND kind = 'train'",
                                    (run,)).fetchall():
            blk = envelope.decode(blob)
            k = (blk.shape[1] - 2) // 3
            keep = np.r_[0:2 + k - 1, 2 + k:2 + 2 * k - 1, 2 + 2 * k:2 + 3 * k - 1]
            db.execute("UPDATE series SET data = ? WHERE id = ?", (envelope.encode(blk[:, keep]), rid))
    db.close()


def stored_before_times(tmp_path, run: str, steps: int) -> None:
    """A run of ``steps`` losses, ended, then its store rewritten as an older wtwind wrote
    it (`make_old`: 8 fields, no ``t0``)."""
    d = Daemon(tmpdir=str(tmp_path)).start()
    try:
        feed(d, run, steps)
        run_at(d, run, steps, "completed")
    finally:
        d.stop()
    make_old(tmp_path / "wtwind.db", run)


class TestTimePerPoint:
    def test_live_restored_and_stored_pages_carry_each_points_time(self, tmp_path):
        """The live page's times are the events' send times, in step order; right after a
        restart and from the store alone they are the same to the store's resolution."""
        d = Daemon(tmpdir=str(tmp_path)).start()
        try:
            lo, hi = feed(d, "timed", 3000)
            live = run_at(d, "timed", 3000, "completed")["series"]
        finally:
            d.stop()
        times = live["time"]
        assert len(times) == len(live["step"]) > 1000 and None not in times
        assert lo <= times[0] <= times[-1] <= hi and times == sorted(times)
        with Daemon(tmpdir=str(tmp_path)) as d2:
            restored = run_at(d2, "timed", 3000, "completed")
        with Daemon(tmpdir=str(tmp_path), extra_env=GONE) as d3:
            stored = run_at(d3, "timed", 3000, "completed")
        assert restored["series"]["time"] == stored["series"]["time"]
        st = stored["series"]
        assert None not in st["time"] and st["time"][0] >= lo - 0.01 and st["time"][-1] <= hi + 0.01
        by_step = dict(zip(live["step"], times))
        for s, t in zip(st["step"], st["time"]):
            if s in by_step:      # a bucket's extremes are points' own times
                assert abs(t - by_step[s]) < 0.05 or lo <= t <= hi

    def test_a_history_stored_before_times_were_kept_reads_with_null_times(self, tmp_path):
        """Blocks of the old width (no time field) and a snapshot without ``t0``: the stored
        page has every point with a null time; a run that goes on after a restart adds
        blocks with times beside the old ones, and both read."""
        stored_before_times(tmp_path, "old", 2000)
        with Daemon(tmpdir=str(tmp_path), extra_env=GONE) as d2:
            stored = run_at(d2, "old", 2000, "completed")
        s = stored["series"]
        assert len(s["step"]) > 500 and set(s["time"]) == {None} and None not in s["loss"]
        with Daemon(tmpdir=str(tmp_path)) as d3:      # it goes on: new blocks carry times
            e = connect(d3.ipc, run="old", resume=True)
            for t in range(2001, 2501):
                e.loss(t, 2.0)
            e.close("completed")
            run_at(d3, "old", 2500, "completed")
        with Daemon(tmpdir=str(tmp_path), extra_env=GONE) as d4:
            s = run_at(d4, "old", 2500, "completed")["series"]
        old = [t for st, t in zip(s["step"], s["time"]) if st <= 2000]
        new = [t for st, t in zip(s["step"], s["time"]) if st > 2000]
        assert sum(t is not None for t in old) <= 2 < len(old)   # a bucket across step 2000 has one
        assert new and None not in new
