"""JobRunner: checkpoint events in, spectral results out, off the event loop.

The runner lives on the daemon's asyncio loop and owns all its state there. Jobs go
to a ``concurrent.futures.Executor``: a spawn-context ``ProcessPoolExecutor`` by
default, or ``distributed.Client(address).get_executor()`` for a Dask cluster.

- **Bounded queue, newest wins**: at most one queued job per run; a newer checkpoint
  replaces the queued one (``skipped``); when ``queue_size`` jobs are queued a job
  for a new run is ``dropped``. A run never has two jobs running at once, so its
  results arrive in checkpoint order.
- **Timeout**: a job past ``timeout_s`` is reported ``timeout`` (a pool's start-up,
  up to ``STARTUP_TIMEOUT_S``, is not counted: the pool is warmed before jobs go in); a local pool is then
  killed and rebuilt (a running process cannot be cancelled otherwise), and the
  other jobs it was running are queued again unless a newer checkpoint came in.
- **Crash**: a worker that dies breaks the pool; its jobs are reported ``crashed``,
  not retried, and the next job gets a fresh pool.
- **Shutdown**: ``aclose()`` cancels queued and running jobs (``cancelled``) and
  kills the pool's processes.

Every finished job (not skipped/dropped ones) is handed to ``on_result`` on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

import structlog

from . import worker
from .config import JobsConfig
from ..spectral.roots import refusal, resolve_roots, roots_for
from .model import DURATION_BUCKETS, OUTCOMES, Job, JobResult, JobStats, job_from_event

log = structlog.get_logger("wtwind.jobs")
STARTUP_TIMEOUT_S = 300.0  # starting a pool (spawn + imports) is not charged to a job's timeout
WORKER_EXIT_TIMEOUT_S = 10.0  # how long aclose() waits for killed workers to be gone


class JobRunner:
    def __init__(self, config: JobsConfig, on_result: Callable[[JobResult], None], *,
                 job_fn: Callable[[dict], dict] = worker.run_job) -> None:
        self.config = config
        self.on_result = on_result
        self.job_fn = job_fn
        self._queue: collections.OrderedDict[str, Job] = collections.OrderedDict()
        self._running: dict[asyncio.Task, tuple[Job, int]] = {}
        self._executor: Executor | None = None
        self._client: Any = None
        self._generation = 0
        self._starting = asyncio.Lock()
        self._requeue: set[asyncio.Task] = set()
        self._closed = False
        self._roots = resolve_roots(config.checkpoint_roots)
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._buckets = [0] * len(DURATION_BUCKETS)
        self._duration_sum = 0.0
        self._duration_count = 0

    # -- public API -------------------------------------------------------------

    def submit(self, run: str, event: dict) -> str:
        """Queue the checkpoint ``event``; returns queued | replaced | dropped | closed."""
        if self._closed:
            return "closed"
        job = job_from_event(run, event)
        refused = refusal(job.path, roots_for(run, self._roots))
        if refused is not None:  # before any open, on the loop (daemon/spectral/roots.py)
            self._finish(job, "refused", "outside_roots", 0.0, error=refused)
            return "refused"
        if run in self._queue:
            self._queue[run] = job
            self._count("skipped")
            outcome = "replaced"
        elif len(self._queue) >= self.config.queue_size:
            self._count("dropped")
            log.warning("job_dropped", run=run, step=job.step, queue_size=self.config.queue_size)
            return "dropped"
        else:
            self._queue[run] = job
            outcome = "queued"
        self._dispatch()
        return outcome

    def stats(self) -> JobStats:
        return JobStats(queue_depth=len(self._queue), running=len(self._running), counts=dict(self._counts),
                        duration_buckets=tuple(zip(DURATION_BUCKETS, self._cumulative())),
                        duration_sum=self._duration_sum, duration_count=self._duration_count)

    async def aclose(self) -> None:
        """Cancel everything, stop the executor, kill local workers."""
        self._closed = True
        for run in list(self._queue):
            self._finish(self._queue.pop(run), "cancelled", "shutdown", 0.0)
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        killed = self._shutdown_executor()
        if killed:  # return only once the workers are gone, so a restart never finds two pools
            await asyncio.to_thread(_wait_exited, killed, WORKER_EXIT_TIMEOUT_S)
        if self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.close)

    # -- dispatch -------------------------------------------------------------

    def _dispatch(self) -> None:
        """Start queued jobs, oldest first, never two of one run at once (results stay in order)."""
        while len(self._running) < self.config.workers and not self._closed:
            busy = {job.run for job, _ in self._running.values()}
            run = next((r for r in self._queue if r not in busy), None)
            if run is None:
                return
            job = self._queue.pop(run)
            task = asyncio.get_running_loop().create_task(self._execute(job))
            self._running[task] = (job, self._generation)

    async def _execute(self, job: Job) -> None:
        t0 = time.monotonic()
        gen = self._generation
        try:
            executor = await self._get_executor()
            gen = self._generation
            self._running[asyncio.current_task()] = (job, gen)
            cf = executor.submit(self.job_fn, self._payload(job))
            raw = await asyncio.wait_for(asyncio.wrap_future(cf), self.config.timeout_s)
        except asyncio.TimeoutError:
            self._on_timeout(job, gen, time.monotonic() - t0)
        except asyncio.CancelledError:
            if asyncio.current_task() in self._requeue and not self._closed:  # a bystander of a kill
                self._requeue.discard(asyncio.current_task())
                self._queue.setdefault(job.run, job)
            else:
                self._finish(job, "cancelled", "shutdown", time.monotonic() - t0)
        except BrokenProcessPool:
            self._on_broken(job, gen, time.monotonic() - t0)
        except Exception as exc:  # task boundary: report, count, keep going
            if type(exc).__name__ == "KilledWorker":  # Dask gave up after its allowed-failures
                self._finish(job, "crashed", "worker_crashed", time.monotonic() - t0, error=str(exc))
                return
            log.exception("job_error", run=job.run, step=job.step)
            self._finish(job, "failed", "error", time.monotonic() - t0, error=f"{type(exc).__name__}: {exc}")
        else:
            self._finish(job, raw.get("outcome", "failed"), raw.get("reason", ""), time.monotonic() - t0,
                         error=raw.get("error", ""), raw=raw)
        finally:
            self._running.pop(asyncio.current_task(), None)
            self._dispatch()

    def _on_timeout(self, job: Job, gen: int, elapsed: float) -> None:
        self._finish(job, "timeout", "timeout", elapsed, error=f"no result after {self.config.timeout_s:g} s")
        if self.config.executor == "process" and gen == self._generation:
            me = asyncio.current_task()
            for task, (_, other_gen) in self._running.items():
                if task is not me and other_gen == gen:  # shares the pool we are about to kill
                    self._requeue.add(task)
                    task.cancel()
            self._shutdown_executor()

    def _on_broken(self, job: Job, gen: int, elapsed: float) -> None:
        if gen == self._generation:
            self._shutdown_executor()
        self._finish(job, "crashed", "worker_crashed", elapsed, error="the worker process died running this job")

    def _payload(self, job: Job) -> dict:
        cfg = self.config
        proj = cfg.projection
        return {"path": job.path, "format": job.format, "want": job.want, "engine": cfg.engine,
                "threads": cfg.threads_per_worker, "device": cfg.device, "max_bytes": cfg.max_checkpoint_bytes,
                "roots": roots_for(job.run, self._roots),
                "projection": {"q": proj.q, "eta": proj.eta, "beta": proj.beta, "erg": proj.erg}}

    # -- executors -------------------------------------------------------------

    async def _get_executor(self) -> Executor:
        async with self._starting:  # one start at a time; the others wait for it
            if self._executor is None:
                if self.config.executor == "dask":
                    from distributed import Client

                    self._client = await asyncio.to_thread(Client, self.config.dask_address)
                    self._executor = self._client.get_executor(pure=False)
                else:
                    self._executor = await self._start_pool()
                self._generation += 1
            return self._executor

    async def _start_pool(self) -> Executor:
        """A spawn-context pool with every worker started and initialised, so that a job's
        timeout never pays for interpreter start-up and heavy imports."""
        import multiprocessing

        pool = ProcessPoolExecutor(
            max_workers=self.config.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=worker.init_pool_worker,
            initargs=(self.config.engine, self.config.threads_per_worker, self.config.worker_memory_bytes))
        pings = [asyncio.wrap_future(pool.submit(worker.ping, 0.2)) for _ in range(self.config.workers)]
        try:
            await asyncio.wait_for(asyncio.gather(*pings), STARTUP_TIMEOUT_S)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return pool

    def _shutdown_executor(self) -> list:
        """Stop the executor; kill and return the local worker processes that were alive."""
        executor, self._executor = self._executor, None
        if executor is None:
            return []
        procs = list((getattr(executor, "_processes", None) or {}).values())
        if isinstance(executor, ProcessPoolExecutor):
            executor.shutdown(wait=False, cancel_futures=True)
        else:  # distributed's ClientExecutor: cancels its own futures
            executor.shutdown(wait=False)
        killed = [proc for proc in procs if proc.is_alive()]
        for proc in killed:
            proc.kill()
        return killed

    # -- bookkeeping ------------------------------------------------------------

    def _finish(self, job: Job, outcome: str, reason: str, elapsed: float, *, error: str = "",
                raw: dict | None = None) -> None:
        outcome = outcome if outcome in OUTCOMES else "failed"
        self._count(outcome)
        if outcome not in ("cancelled",):
            self._observe(elapsed)
        result = JobResult.build(job, outcome, reason, error, elapsed, raw or {})
        log.info("job_done", run=job.run, step=job.step, outcome=outcome, reason=reason,
                 duration_s=round(elapsed, 3))
        try:
            self.on_result(result)
        except Exception:  # the callback is the daemon's; a bug there must not kill the runner
            log.exception("job_result_callback_failed", run=job.run)

    def _count(self, outcome: str) -> None:
        self._counts[outcome] += 1

    def _observe(self, seconds: float) -> None:
        self._duration_sum += seconds
        self._duration_count += 1
        for i, edge in enumerate(DURATION_BUCKETS):
            if seconds <= edge:
                self._buckets[i] += 1
                break

    def _cumulative(self) -> list[int]:
        out, acc = [], 0
        for n in self._buckets:
            acc += n
            out.append(acc)
        return out


def _wait_exited(procs: list, timeout: float) -> None:
    """Block until every process has exited, judged by its sentinel (not waitpid, which the
    pool's own manager thread may already have reaped: then is_alive() can read True)."""
    from multiprocessing.connection import wait

    pending = {p.sentinel: p for p in procs}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for s in wait(list(pending), timeout=max(0.0, deadline - time.monotonic())):
            pending.pop(s, None)
    if pending:
        log.warning("workers_still_running", pids=[p.pid for p in pending.values()])
