"""Which checkpoint paths the daemon may open: ``[jobs] checkpoint_roots``.

A checkpoint event names a path, and the daemon (not the trainer) opens it. Without a
bound any client could make it open ``/etc/shadow`` or ``/proc/self/environ`` and learn
from the job's outcome whether the file exists. So a path is taken only when it is
absolute and, with every symlink resolved, lies under one of the configured roots
(resolved the same way). The check runs on the event loop before the job is queued,
and again in the worker, which then opens the file one folder at a time from the root
with ``O_NOFOLLOW`` (``safe_open.py``): a symlink swapped in between fails the open.
No roots configured means no checkpoint is opened: jobs are refused with reason
``outside_roots`` and a hint.

A root may hold ``{run}``: ``/data/ckpt/{run}`` lets each run read only its own folder
(runs belong to their principal, so another client can neither read nor project
them). A run name that is not a plain folder name (``/``, ``.``, ``..``) matches no such
root.
"""

from __future__ import annotations

import os

RUN = "{run}"


def resolve_roots(roots) -> tuple[str, ...]:
    """Each root with its symlinks resolved; a ``{run}`` root is resolved per run."""
    return tuple(r if RUN in r else os.path.realpath(r) for r in roots)


def roots_for(run: str, roots: tuple[str, ...]) -> tuple[str, ...]:
    """The concrete roots run ``run`` may read under."""
    safe = run not in (".", "..") and "/" not in run and "\0" not in run
    return tuple(os.path.realpath(r.replace(RUN, run)) if RUN in r else r
                 for r in roots if RUN not in r or safe)


def root_of(path: str, roots: tuple[str, ...]) -> str | None:
    """The root that ``path`` (resolved) lies under, else None."""
    real = os.path.realpath(path)
    for root in roots:
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return root
    return None


def refusal(path: str, roots: tuple[str, ...]) -> str | None:
    """None when ``path`` may be opened, else the reason, meant for an operator."""
    if not roots:
        return "no [jobs] checkpoint_roots configured for this run: checkpoint analysis is off"
    if not os.path.isabs(path):
        return "checkpoint path must be absolute"
    if root_of(path, roots) is None:
        return "checkpoint path is outside [jobs] checkpoint_roots"
    return None
