"""``[jobs]``: background checkpoint analysis and projection.

```toml
[jobs]
engine = "fast"              # fast | weightwatcher
executor = "process"         # process | dask
dask_address = "tcp://scheduler:8786"   # executor = "dask" only
workers = 1                  # process pool size (ignored for dask: the cluster decides)
threads_per_worker = 1       # BLAS/torch threads inside each worker
queue_size = 16              # queued jobs across all runs; one per run at most
timeout_s = 600
max_checkpoint_bytes = 8589934592
checkpoint_roots = ["/data/checkpoints"]  # only paths under these are opened (none: no jobs);
                                          # "/data/ckpt/{run}": each run only under its own folder
worker_memory_bytes = 17179869184         # address-space limit of each local worker
max_layers_exported = 32     # per-run layer series in /metrics
alpha_min = 2.0              # the healthy band for alerts
alpha_max = 6.0

[jobs.projection]            # WW-PGD parameters of `want: project` jobs
q = 1.0
eta = 0.5
beta = 0.5
erg = "preserve"
```
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import require

ENGINES = ("fast", "weightwatcher")
EXECUTORS = ("process", "dask")
ERG_MODES = ("enforce", "preserve", "off")


@dataclass(frozen=True, kw_only=True)
class ProjectionConfig:
    """WW-PGD step used by projection jobs (see emitters/projection.py for the meaning)."""

    q: float = 1.0
    eta: float = 0.5
    beta: float = 0.5
    erg: str = "preserve"

    def __post_init__(self) -> None:
        require(0 < self.q <= 10, f"q: {self.q} must be in (0, 10]")
        require(self.eta > 0, f"eta: {self.eta} must be > 0")
        require(0 <= self.beta <= 1, f"beta: {self.beta} must be in [0, 1]")
        require(self.erg in ERG_MODES, f"erg: {self.erg!r} is not one of {ERG_MODES}")


@dataclass(frozen=True, kw_only=True)
class JobsConfig:
    enabled: bool = True
    engine: str = "fast"
    executor: str = "process"
    dask_address: str | None = None
    workers: int = 1
    threads_per_worker: int = 1
    queue_size: int = 16
    timeout_s: float = 600.0
    max_checkpoint_bytes: int = 8 << 30
    checkpoint_roots: tuple[str, ...] = ()
    worker_memory_bytes: int = 16 << 30
    max_layers_exported: int = 32
    alpha_min: float = 2.0
    alpha_max: float = 6.0
    trend_checkpoints: int = 3
    device: str = "auto"
    projection: ProjectionConfig = field(default_factory=ProjectionConfig)

    def __post_init__(self) -> None:
        require(self.engine in ENGINES, f"engine: {self.engine!r} is not one of {ENGINES}")
        require(self.executor in EXECUTORS, f"executor: {self.executor!r} is not one of {EXECUTORS}")
        require(self.executor != "dask" or bool(self.dask_address),
                "dask_address: required when executor = \"dask\" (e.g. tcp://scheduler:8786)")
        require(1 <= self.workers <= 256, f"workers: {self.workers} must be in 1..256")
        require(1 <= self.threads_per_worker <= 256, f"threads_per_worker: {self.threads_per_worker} must be in 1..256")
        require(1 <= self.queue_size <= 100_000, f"queue_size: {self.queue_size} must be in 1..100000")
        require(self.timeout_s > 0, f"timeout_s: {self.timeout_s} must be > 0 seconds")
        require(self.max_checkpoint_bytes > 0, "max_checkpoint_bytes: must be > 0")
        for root in self.checkpoint_roots:
            require(root.startswith("/"), f"checkpoint_roots: {root!r} must be an absolute path")
        require(self.worker_memory_bytes >= 1 << 30, "worker_memory_bytes: must be >= 1 GiB")
        require(0 <= self.max_layers_exported <= 10_000, "max_layers_exported: must be in 0..10000")
        require(0 < self.alpha_min < self.alpha_max,
                f"alpha_min/alpha_max: need 0 < alpha_min < alpha_max, got {self.alpha_min}, {self.alpha_max}")
        require(self.trend_checkpoints >= 2, "trend_checkpoints: must be >= 2")
        require(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
                f"device: {self.device!r} is not auto, cpu, cuda or cuda:N")
