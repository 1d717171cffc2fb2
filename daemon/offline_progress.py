"""A progress bar on stderr for analyses that run longer than about 2 s (tqdm's
``delay``); none with ``--json`` or when stderr is not a terminal.

``with_progress(log, on)`` wraps a `TrainingLog` so that iterating its ``events()``
advances the bar; everything else reads through to the log, so the replay loop that
consumes it is unchanged.
"""

from __future__ import annotations

import sys

DELAY_S = 1.5  # with reading and start-up, a bar on what runs longer than about 2 s


class _Progress:
    def __init__(self, log) -> None:
        self._log = log

    def __getattr__(self, name):
        return getattr(self._log, name)

    def events(self, *args, **kwargs):
        from tqdm import tqdm

        total = self._log.n_loss + self._log.n_val
        yield from tqdm(self._log.events(*args, **kwargs), total=total, delay=DELAY_S, unit=" points",
                        file=sys.stderr, leave=False, mininterval=0.25, desc="wtwin monitor")


def with_progress(log, on: bool):
    if not on:
        return log
    try:
        import tqdm  # noqa: F401
    except ModuleNotFoundError:
        return log
    return _Progress(log)


def wanted(json_out: bool) -> bool:
    return not json_out and sys.stderr.isatty()
