"""Any other number a trainer logs (``scalar`` events, ``emit.scalar(step, name, value)``):
one bounded series per name, live and in the store, charted on the run page.

Every byte is hostile: a run keeps at most ``per_run`` names (32), the daemon at most
``max_series`` (2,048) over all runs in memory (`ScalarBudget`); a value whose name is
past a cap is dropped, counted by reason in ``wtwind_scalars_dropped_total{reason}``
(``names_per_run``, ``names_total``) and logged once per run and reason, never raised.
The wire has already held the name to 1..64 chars of a safe set (``bounds.scalar_name_ok``).

Each name is a `Decimated` of ``(step, value)`` with the loss series' downsampling
(1,024 newest points exactly, 512 log-spaced bins of the past, the mean of finite values
in a bin), NaN and infinities kept as the loss keeps them (``None`` in JSON). Its whole
history goes to the store as the loss's does: an `Envelope` per name, written with the
run's snapshot as ``series`` rows of kind ``s:<name>`` (``history.run_record`` reads them
back). A run that sends no scalar never builds any of this.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import structlog

from .series import Decimated

log = structlog.get_logger("wtwind.runs")

FIELDS = ("step", "value")
KIND_PREFIX = "s:"          # the store's ``series.kind`` of a scalar's history
PER_RUN = 32
MAX_SERIES = 2048         # about 107 KB each at worst: 219 MB (docs/SECURITY.md)
# a run's series of time and memory (`series.RunSeries.add_timing`) takes this many of
# ``max_series``: about 231 KB at worst, so 2,048 units hold 2,048 scalars or 1,024 runs'
# timing, 219 or 237 MB
TIMING_UNITS = 2
ENVELOPE_FLOOR = 256        # stored buckets per name: 256..512 (the loss keeps 1,024..2,048)
DROP_REASONS = ("names_per_run", "names_total", "timing_total")


class ScalarBudget:
    """The daemon's extra series, scalars and each run's time and memory (`TIMING_UNITS`):
    how many all runs in memory hold (``held``, at most ``max_series``), and the values
    dropped, by reason. A run's series leave the count when the run leaves memory."""

    def __init__(self, max_series: int = MAX_SERIES, per_run: int = PER_RUN) -> None:
        if max_series < 1 or per_run < 1:
            raise ValueError("max_series and per_run must be >= 1")
        self.max_series, self.per_run = max_series, per_run
        self.held = 0
        self.dropped: Counter = Counter()

    def release(self, series: dict) -> None:
        self.held -= len(series)

    def take_timing(self, owner) -> bool:
        """May a run keep a series of time and memory (``owner``)? Counted against
        ``max_series`` until ``owner`` is gone; past the cap, False and counted
        (``timing_total``: the run's row is dropped)."""
        if self.held + TIMING_UNITS > self.max_series:
            self.dropped["timing_total"] += 1
            return False
        self.held += TIMING_UNITS
        weakref.finalize(owner, self._untake)
        return True

    def _untake(self) -> None:
        self.held -= TIMING_UNITS


class RunScalars:
    """One run's scalar series by name. ``history``: the envelopes' stored state (name ->
    ``Envelope.snapshot()``): those names are the run's already and count against the caps;
    ``keep=False``: no envelopes (no store)."""

    def __init__(self, run: str, budget: ScalarBudget | None = None, history: dict | None = None,
                 keep: bool = True) -> None:
        self.run, self.keep = run, keep
        self.budget = budget if budget is not None else ScalarBudget()
        self.series: dict[str, Decimated] = {}
        self._told: set[str] = set()    # drop reasons already logged for this run
        weakref.finalize(self, self.budget.release, self.series)
        for name, state in (history or {}).items():
            if isinstance(name, str) and isinstance(state, dict):
                self._open(name, state)

    def add(self, step: int, name: str, value: float) -> None:
        series = self.series.get(name)
        if series is None:
            series = self._open(name)
            if series is None:
                return
        series.push((step, value))

    def _open(self, name: str, state: dict | None = None) -> Decimated | None:
        budget = self.budget
        reason = ("names_per_run" if len(self.series) >= budget.per_run
                  else "names_total" if budget.held >= budget.max_series else None)
        if reason is not None:
            budget.dropped[reason] += 1
            if reason not in self._told:
                self._told.add(reason)
                log.warning("scalar_dropped", run=self.run, reason=reason, name=name,
                            per_run=budget.per_run, max_series=budget.max_series)
            return None
        env = None
        if self.keep:
            from .store.envelope import Envelope   # numpy only: no store import at module level

            env = Envelope(FIELDS[1:], kind=KIND_PREFIX + name, floor=ENVELOPE_FLOOR)
            if state:
                env.restore(state)
        budget.held += 1
        series = self.series[name] = Decimated(FIELDS, mean=("value",), history=env)
        return series

    def columns(self) -> dict[str, dict[str, list]]:
        """name -> JSON-safe ``{"step": [...], "value": [...]}``, names sorted."""
        return {name: self.series[name].columns() for name in sorted(self.series)}

    def take_history(self) -> tuple[dict[str, Any], list]:
        """The envelopes' state by name (for the snapshot) and the chunks to write with it."""
        state, chunks = {}, []
        for name, s in self.series.items():
            if s.history is None:
                continue
            s._flush()
            chunk = s.history.take()
            if chunk is not None:
                chunks.append(chunk)
            state[name] = s.history.snapshot()
        return state, chunks
