"""Background jobs: checkpoint analysis and WW-PGD projection on an executor.

``JobRunner`` (runner.py) is the loop-side object the server owns; ``worker.py``
is what runs in the pool; ``JobsConfig`` (config.py) is the ``[jobs]`` section.
"""

from .config import JobsConfig, ProjectionConfig
from .model import OUTCOMES, Job, JobResult, JobStats
from .runner import JobRunner

__all__ = ["OUTCOMES", "Job", "JobResult", "JobRunner", "JobStats", "JobsConfig", "ProjectionConfig"]
