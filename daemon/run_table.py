"""The table of live runs: ``RunTable`` creates a `RunState` on a run's first event
(charged to its creator, refused past ``max_runs``), renames an ended run whose name is
used again, and expires ended and idle runs. One asyncio loop owns it: no locks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from .run_state import RunState
from .scalars import ScalarBudget

if TYPE_CHECKING:
    from .spectral.health import SpectralWatch


class RunTable:
    def __init__(self, *, preset: str, cooldown_s: float, max_runs: int,
                 new_watch: Callable[[], "SpectralWatch"] | None = None, keep_history: bool = True,
                 scalar_budget: ScalarBudget | None = None, **text_limits: int) -> None:
        """``text_limits``: ``RunState``'s ``max_*`` for every run; ``scalar_budget``: the
        bound on all runs' scalar series together (a fresh one by default)."""
        self.scalar_budget = scalar_budget if scalar_budget is not None else ScalarBudget()
        self.text_limits = text_limits
        self.preset = preset
        self.keep_history = keep_history
        self.cooldown_s = cooldown_s
        self.max_runs = max_runs
        self.new_watch = new_watch
        self._runs: dict[str, RunState] = {}
        self.refused = 0

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[RunState]:
        return iter(self._runs.values())

    def get(self, run: str) -> RunState | None:
        return self._runs.get(run)

    def get_or_create(self, run: str, now: float, creator=None, force: bool = False) -> RunState | None:
        """The run ``run``; a new one is charged to ``creator`` (admission.py). ``force``:
        past ``max_runs`` (a new run of a name whose ended run was archived beside it)."""
        state = self._runs.get(run)
        if state is None:
            if len(self._runs) >= self.max_runs and not force:
                self.refused += 1
                return None
            state = self._runs[run] = RunState(run, preset=self.preset, cooldown_s=self.cooldown_s,
                                               now=now, creator=creator, new_watch=self.new_watch,
                                               keep_history=self.keep_history,
                                               scalar_budget=self.scalar_budget, **self.text_limits)
        return state

    def forget(self, run: str) -> RunState | None:
        return self._runs.pop(run, None)

    def rename(self, run: str, to: str) -> None:
        """Move the run ``run`` to the name ``to`` (an ended run whose name is used again:
        `incarnations`)."""
        state = self._runs.pop(run)
        state.run = to
        self._runs[to] = state

    def expire(self, now: float, *, idle_ttl_s: float, ended_ttl_s: float,
               ended_series_s: float = 0.0) -> list[RunState]:
        """Ended runs leave after ``ended_ttl_s``, or ``ended_series_s`` if longer for a
        ``held`` run (its series stay for Prometheus); idle ones after ``idle_ttl_s``."""
        def ended_for(r: RunState) -> float:
            return max(ended_ttl_s, ended_series_s) if r.held else ended_ttl_s

        gone = [r for r in self._runs.values()
                if (r.status != "running" and now - r.last_seen >= ended_for(r))
                or now - r.last_seen >= idle_ttl_s]
        for r in gone:
            del self._runs[r.run]
        return gone
