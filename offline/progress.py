"""A progress bar on stderr for analyses that run longer than about 2 s (tqdm's
``delay``); none with ``--json`` or when stderr is not a terminal.

``with_progress(log, on)`` wraps a `TrainingLog` so that iterating its ``events()``
advances the bar (every `STRIDE` events, cheaper than tqdm's own per-event iterator);
everything else reads through to the log, so the replay loop that consumes it is
unchanged.
"""

from __future__ import annotations

import sys
from itertools import chain, islice

DELAY_S = 1.5  # with reading and start-up, a bar on what runs longer than about 2 s
STRIDE = 4096  # events between updates of the bar: its cost is per stride, not per event


class _Progress:
    def __init__(self, log) -> None:
        self._log = log

    def __getattr__(self, name):
        return getattr(self._log, name)

    def events(self, *args, **kwargs):
        """The log's events, flattened in C from strides that advance the bar."""
        return chain.from_iterable(self._strides(self._log.events(*args, **kwargs)))

    def _strides(self, it):
        from tqdm import tqdm

        total = self._log.n_loss + self._log.n_val
        with tqdm(total=total, delay=DELAY_S, unit=" points", file=sys.stderr, leave=False,
                  mininterval=0.25, desc="wtwin monitor") as bar:
            while chunk := list(islice(it, STRIDE)):
                yield chunk
                bar.update(len(chunk))


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
