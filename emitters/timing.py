"""The run's time and memory as a loss event carries them (``step_time_s``, ``data_wait_s``,
``mem_allocated``, ``mem_reserved``, ``mem_total``: emitters/schema.py ``TIMING``).

`StepClock` times a loop's steps from two marks per step: `begin` once the batch is in
hand, `end` once the optimizer stepped; the time from one step's end to the next one's
begin is the wait for data (with a data loader, mostly its ``next()``). `take` gives the
means since the last take, for the next loss event. `device_memory` reads the
accelerator's bytes (``torch.cuda``, imported lazily: nothing when torch or CUDA is
absent). The framework callbacks (hf.py, lightning.py) use both; any loop can:

    clock = StepClock()
    for batch in loader:
        clock.begin()
        ...  # forward, backward, step
        clock.end()
        emit.loss(step, loss, **clock.take(), **device_memory(every=50, step=step))

Light: no import of torch at module level.
"""

from __future__ import annotations

import sys
import time


class StepClock:
    """Step time and data wait, averaged over the steps since the last `take`."""

    def __init__(self, clock=time.perf_counter) -> None:
        self._clock = clock
        self._last_end = None
        self._begun = None
        self._steps = 0
        self._wait = self._time = 0.0

    def begin(self) -> None:
        """The step's batch is in hand."""
        self._begun = self._clock()

    def end(self) -> None:
        """The step is done (the optimizer stepped)."""
        now = self._clock()
        if self._last_end is not None and self._begun is not None and self._begun >= self._last_end:
            self._wait += self._begun - self._last_end
            self._time += now - self._last_end
            self._steps += 1
        self._last_end, self._begun = now, None

    def take(self) -> dict:
        """``{"step_time_s", "data_wait_s"}``: the means since the last take ({} before a
        whole step was timed)."""
        if not self._steps:
            return {}
        out = {"step_time_s": self._time / self._steps, "data_wait_s": self._wait / self._steps}
        self._steps, self._wait, self._time = 0, 0.0, 0.0
        return out


def device_memory(every: int = 1, step: int = 0) -> dict:
    """The accelerator's bytes, every ``every`` steps (``step % every == 0``), else {}:
    ``mem_allocated`` the peak allocated since the last read (the sawtooth of a step's
    activations read at its top: the peak is reset after each read), ``mem_reserved``
    (the caching allocator's) and ``mem_total`` (the device's). {} without torch loaded
    or without CUDA."""
    if every > 1 and step % every:
        return {}
    torch = sys.modules.get("torch")    # never imported here: a loop on CUDA has it
    if torch is None or not torch.cuda.is_available():
        return {}
    cuda = torch.cuda
    out = {"mem_allocated": float(cuda.max_memory_allocated()),
           "mem_reserved": float(cuda.memory_reserved()),
           "mem_total": float(cuda.get_device_properties(cuda.current_device()).total_memory)}
    cuda.reset_peak_memory_stats()
    return out
