"""How long Python's cyclic garbage collector has held this process, by generation.

A full collection walks every object the daemon holds: under a flood of new runs it
took 0.1-0.5 s at 300-700 MB (2026-12-07, `tests/bench/attacks.py all`), inside
whichever frame's handler happened to allocate at that moment. The receiver charges
each peer's bucket with its frames' time less the collector's (`Receiver._timed`): a
trainer's one-event frame is not billed for a pause the flood's runs caused. The
receiver's `/metrics` show the totals (``wtwind_gc_seconds_total{generation}``).
"""

from __future__ import annotations

import gc
import time


class GcClock:
    def __init__(self) -> None:
        self.seconds = 0.0                       # all generations, since `install`
        self.by_generation = [0.0, 0.0, 0.0]
        self._started = 0.0

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.seconds += took
        self.by_generation[info["generation"]] += took
