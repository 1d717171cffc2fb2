"""JobRunner on a real spawn process pool: results, newest-wins, timeouts, crashes, shutdown."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing.connection
import os
import time

import pytest

torch = pytest.importorskip("torch")

from wtwin.daemon.jobs import JobRunner, JobsConfig  # noqa: E402
from wtwin.daemon.jobs import worker  # noqa: E402


def _save(path, seed=0, shapes=((64, 32), (48, 48))):
    g = torch.Generator().manual_seed(seed)
    sd = {f"l{i}.weight": torch.randn(*s, generator=g) for i, s in enumerate(shapes)}
    torch.save(sd, path)
    return str(path)


async def _until(pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.02)


def _event(step, path, **kw):
    return {"type": "checkpoint", "step": step, "path": path, **kw}


class TestJobRunner:
    def test_analyze_job_returns_layer_results(self, tmp_path):
        """A checkpoint event comes back as per-layer alphas on the loop."""
        results = []
        path = _save(tmp_path / "a.pt")

        async def main():
            runner = JobRunner(JobsConfig(checkpoint_roots=("/",), timeout_s=120), results.append)
            assert runner.submit("r1", _event(10, path)) == "queued"
            await _until(lambda: results)
            stats = runner.stats()
            await runner.aclose()
            return stats

        stats = asyncio.run(main())
        (res,) = results
        assert res.ok and res.run == "r1" and res.step == 10
        assert [lr.name for lr in res.layers] == ["l0", "l1"]
        assert all(lr.alpha > 1 for lr in res.layers)
        assert stats.counts["ok"] == 1 and stats.duration_count == 1 and stats.queue_depth == 0

    def test_bad_checkpoints_fail_clearly_and_pool_survives(self, tmp_path):
        """Missing, garbage and oversized files fail with a reason; a good one still succeeds after."""
        results = {}
        garbage = tmp_path / "junk.pt"
        garbage.write_bytes(b"this is not a checkpoint" * 10)
        big = _save(tmp_path / "big.pt", shapes=((256, 256),))
        good = _save(tmp_path / "good.pt")

        async def main():
            runner = JobRunner(JobsConfig(checkpoint_roots=("/",), timeout_s=120, max_checkpoint_bytes=100_000, queue_size=8),
                               lambda r: results.__setitem__(r.run, r))
            runner.submit("missing", _event(1, str(tmp_path / "nope.pt")))
            runner.submit("junk", _event(1, str(garbage)))
            runner.submit("big", _event(1, big))
            runner.submit("good", _event(1, good))
            await _until(lambda: len(results) == 4)
            await runner.aclose()

        asyncio.run(main())
        assert results["missing"].reason == "missing"
        assert results["junk"].reason == "not_a_checkpoint"
        assert results["big"].reason == "too_large"
        assert all(results[k].outcome == "failed" for k in ("missing", "junk", "big"))
        assert results["good"].ok

    def test_newest_checkpoint_replaces_queued_one(self, tmp_path):
        """While a job runs, three checkpoints of one run queue up: only the last is analysed."""
        results = []
        path = _save(tmp_path / "a.pt")
        fn = functools.partial(_slow_then_run, 0.0)

        async def main():
            runner = JobRunner(JobsConfig(checkpoint_roots=("/",), timeout_s=60, queue_size=2), results.append, job_fn=fn)
            runner.submit("busy", {"step": 0, "path": path, "want": ["sleep"]})
            for step in (1, 2, 3):
                runner.submit("r", _event(step, path))
            assert runner.submit("other", _event(1, path)) == "queued"
            assert runner.submit("third", _event(1, path)) == "dropped"
            await _until(lambda: len(results) == 3)
            stats = runner.stats()
            await runner.aclose()
            return stats

        stats = asyncio.run(main())
        assert sorted((r.run, r.step) for r in results) == [("busy", 0), ("other", 1), ("r", 3)]
        assert stats.counts["skipped"] == 2 and stats.counts["dropped"] == 1

    def test_timeout_kills_the_job_and_the_next_one_runs(self, tmp_path):
        """A job past timeout_s is reported as such; the rebuilt pool runs the next job."""
        results = []
        path = _save(tmp_path / "a.pt")

        async def main():
            runner = _slow_job_then(3.0, results, path, "fast")
            await _until(lambda: len(results) == 2, timeout=90)
            await runner.aclose()

        asyncio.run(main())  # the slow job sleeps 120 s: both results within 90 s, it was killed
        by_run = {r.run: r for r in results}
        assert by_run["slow"].outcome == "timeout"
        assert by_run["fast"].ok

    @pytest.mark.slow  # 35 s on 2 busy cores (make test-all, CI)
    def test_bystanders_of_a_timeout_kill_are_requeued(self, tmp_path):
        """With two workers, the job sharing the pool with a timed-out one runs again and succeeds."""
        results = []
        path = _save(tmp_path / "a.pt")

        async def main():
            runner = JobRunner(JobsConfig(checkpoint_roots=("/",), timeout_s=8.0, workers=2), results.append, job_fn=_marker_job)
            runner.submit("slow", {"step": 1, "path": path, "want": ["slow", str(tmp_path)]})
            await _until(lambda: (tmp_path / "slow.started").exists())
            runner.submit("bystander", {"step": 2, "path": path, "want": ["bystander", str(tmp_path)]})
            await _until(lambda: len(results) == 2, timeout=120)
            stats = runner.stats()
            await runner.aclose()
            return stats

        stats = asyncio.run(main())
        assert sorted((r.run, r.outcome) for r in results) == [("bystander", "ok"), ("slow", "timeout")]
        assert (tmp_path / "bystander.started").exists() and stats.counts["crashed"] == 0

    @pytest.mark.slow  # 16 s on 2 busy cores (make test-all, CI)
    def test_crashed_worker_is_reported_not_retried(self, tmp_path):
        """A job that kills its worker comes back 'crashed' once; the next job gets a fresh pool."""
        results = []
        path = _save(tmp_path / "a.pt")

        async def main():
            runner = JobRunner(JobsConfig(checkpoint_roots=("/",), timeout_s=60), results.append, job_fn=_crash_or_run)
            runner.submit("bad", {"step": 1, "path": path, "want": ["crash"]})
            await _until(lambda: len(results) == 1)
            runner.submit("good", _event(2, path))
            await _until(lambda: len(results) == 2)
            stats = runner.stats()
            await runner.aclose()
            return stats

        stats = asyncio.run(main())
        assert [(r.run, r.outcome) for r in results] == [("bad", "crashed"), ("good", "ok")]
        assert stats.counts["crashed"] == 1

    def test_shutdown_cancels_running_and_queued(self, tmp_path):
        """aclose() returns promptly, reports both jobs cancelled and leaves no live worker."""
        results = []
        path = _save(tmp_path / "a.pt")

        async def main():
            runner = _slow_job_then(600, results, path, "queued")
            await _until(lambda: runner.stats().running == 1 and runner._executor is not None)
            await _until(lambda: bool(getattr(runner._executor, "_processes", None)))
            procs = list(runner._executor._processes.values())
            t0 = time.monotonic()
            await runner.aclose()
            # judged right when aclose() returns, by the sentinel (closed once the process is
            # gone), not by is_alive(): the pool's manager thread may have reaped it first
            gone = multiprocessing.connection.wait([p.sentinel for p in procs], timeout=0)
            return time.monotonic() - t0, procs, gone, runner.submit("late", _event(3, path))

        elapsed, procs, gone, late = asyncio.run(main())
        assert elapsed < 60  # against the running job's 120 s: it was not waited for
        assert sorted((r.run, r.outcome) for r in results) == [("queued", "cancelled"), ("slow", "cancelled")]
        assert procs and sorted(gone) == sorted(p.sentinel for p in procs)
        assert late == "closed"


def _slow_then_run(delay, spec):
    if "sleep" in spec["want"]:
        time.sleep(1.5)
        return {"outcome": "ok"}
    return worker.run_job(spec)


def _slow_job_then(timeout_s, results, path, name):
    """A runner given a job that overruns any timeout ("slow"), then a real one (``name``)."""
    runner = JobRunner(JobsConfig(checkpoint_roots=("/",), timeout_s=timeout_s), results.append,
                       job_fn=_slow_then_run_sleepy)
    runner.submit("slow", {"step": 1, "path": path, "want": ["sleep"]})
    runner.submit(name, _event(2, path))
    return runner


def _slow_then_run_sleepy(spec):
    """A job that overruns any timeout when it wants "sleep"; else the real job."""
    if "sleep" in spec["want"]:
        time.sleep(120)
        return {"outcome": "ok", "reason": "", "error": "", "duration_s": 120.0}
    return worker.run_job(spec)


def _marker_job(spec):
    """'slow' sleeps past any timeout; 'bystander' sleeps on its first attempt only."""
    import pathlib

    kind, where = spec["want"]
    marker = pathlib.Path(where) / f"{kind}.started"
    if kind == "bystander" and marker.exists():
        return {"outcome": "ok"}
    marker.touch()
    time.sleep(60)
    return {"outcome": "ok"}


def _crash_or_run(spec):
    """Kills its worker process outright when it wants "crash" (what a segfaulting BLAS looks
    like to the pool); else the real job."""
    if "crash" in spec["want"]:
        os._exit(7)
    return worker.run_job(spec)
