"""Which checkpoint paths the daemon may open: ``[jobs] checkpoint_roots`` (issue 15).

A checkpoint event names a path, and the daemon (not the trainer) opens it. Without a
bound any client could make it open ``/etc/shadow`` or ``/proc/self/environ`` and learn
from the job's outcome whether the file exists. So a path is taken only when it is
absolute and, with every symlink resolved, lies under one of the configured roots
(resolved the same way). The check runs on the event loop before the job is queued,
and again in the worker right before the open (a symlink swapped in between is caught
there; what remains is the window between that check and the open itself). No roots
configured means no checkpoint is opened: jobs are refused with reason
``outside_roots`` and a hint.
"""

from __future__ import annotations

import os


def resolve_roots(roots) -> tuple[str, ...]:
    return tuple(os.path.realpath(r) for r in roots)


def refusal(path: str, roots: tuple[str, ...]) -> str | None:
    """None when ``path`` may be opened, else the reason, meant for an operator."""
    if not roots:
        return "no [jobs] checkpoint_roots configured: checkpoint analysis is off"
    if not os.path.isabs(path):
        return "checkpoint path must be absolute"
    real = os.path.realpath(path)
    for root in roots:
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return None
    return "checkpoint path is outside [jobs] checkpoint_roots"
