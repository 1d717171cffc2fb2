"""What runs inside a job worker (a pool process or a Dask worker).

Only the standard library is imported at module level: the daemon imports this
module to hand ``run_job`` to the executor, and must not pay for torch there.
``init_worker`` does the heavy imports once per worker process and pins BLAS and
torch to ``threads`` threads (a pool of N workers on N cores must not start N^2
threads). ``run_job`` calls it too, so Dask workers, which have no initializer,
get the same treatment on their first job.

A pool worker also watches its parent (`watch_parent`): a daemon that is SIGKILLed
cannot shut its pool down, and its workers (hundreds of MB each, torch imported) would
otherwise live on as orphans. Once a second, a worker whose parent changed exits.

``run_job`` takes and returns plain dicts (picklable across any executor). An
expected failure (bad checkpoint) is a returned ``outcome = "failed"`` with a reason;
anything else raises and the runner reports it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

_READY: tuple | None = None
_WATCHING = False


def watch_parent(interval_s: float = 1.0) -> None:
    """Exit this process once the process that started it is gone (reparented)."""
    global _WATCHING
    if _WATCHING:
        return
    _WATCHING = True
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(0)    # nothing to flush: results go back only through the parent

    threading.Thread(target=watch, name="wtwin-parent-watch", daemon=True).start()


def init_pool_worker(engine: str = "fast", threads: int = 1, memory_bytes: int | None = None) -> None:
    """The local pool's initializer: `watch_parent`, a memory limit, then `init_worker`.

    The limit is on the worker's address space (``RLIMIT_AS``): a checkpoint that makes a
    job allocate past it fails that job with a MemoryError instead of taking the host's
    memory (a tiny crafted file can ask for gigabytes)."""
    watch_parent()
    if memory_bytes:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    init_worker(engine, threads)


def init_worker(engine: str = "fast", threads: int = 1) -> None:
    """Heavy imports and thread limits, once per process."""
    global _READY
    if _READY == (engine, threads):
        return
    import numpy  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    threadpool_limits(limits=threads)
    if engine == "weightwatcher":
        import logging

        import weightwatcher  # noqa: F401  (seconds of import, paid here once)

        logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    _READY = (engine, threads)


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the checkpoint once, then analyse and/or project it."""
    init_worker(spec.get("engine", "fast"), spec.get("threads", 1))
    from wtwin.daemon.spectral import analyze
    from wtwin.daemon.spectral.checkpoint import CheckpointError, load_opened
    from wtwin.daemon.spectral.safe_open import open_checkpoint

    t0 = time.perf_counter()
    try:
        ck = open_checkpoint(spec["path"], spec.get("roots"))
    except CheckpointError as exc:
        return {"outcome": "failed", "reason": exc.reason, "error": str(exc), "duration_s": time.perf_counter() - t0}
    with ck:
        try:
            state_dict = load_opened(ck, spec.get("format"), max_bytes=spec.get("max_bytes"))
        except MemoryError:
            return {"outcome": "failed", "reason": "out_of_memory", "duration_s": time.perf_counter() - t0,
                    "error": "the checkpoint needs more than [jobs] worker_memory_bytes"}
        except CheckpointError as exc:
            return {"outcome": "failed", "reason": exc.reason, "error": str(exc),
                    "duration_s": time.perf_counter() - t0}
        out: dict[str, Any] = {"outcome": "ok", "reason": "", "error": ""}
        want = spec.get("want") or ("analyze",)
        if "analyze" in want:
            layers = analyze(state_dict, engine=spec.get("engine", "fast"), device=spec.get("device", "auto"))
            out["layers"] = [layer.to_dict() for layer in layers]
        if "project" in want:
            from .project import project_checkpoint

            try:  # written beside the file opened, through its folder's descriptor
                path, report = project_checkpoint(state_dict, spec["path"], spec.get("format"),
                                                  spec.get("projection") or {}, opened=ck)
            except CheckpointError as exc:  # target_exists: a file wtwind did not write
                out.update(outcome="failed", reason=exc.reason, error=str(exc))
                return out
            out["projected_path"] = path
            out["projection"] = report
    out["duration_s"] = time.perf_counter() - t0
    return out


def ping(seconds: float = 0.0) -> int:
    """Warm-up no-op: holding a worker a moment makes the pool start the next one."""
    time.sleep(seconds)
    return os.getpid()
