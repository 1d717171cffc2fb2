"""The time and memory columns of a CSV or JSONL training log, for ``wtwin monitor --timing``.

A log that has a step column and one of: a wall time (``ts``, ``timestamp``, ``time``,
``wall_time``, ``_timestamp`` (W&B), ``Wall time`` (TensorBoard's CSV export): seconds),
a step time (``step_time_s``, ``step_time``, ``iter_time``, ``time_per_iter``, ``dt``
(nanoGPT's, in seconds); ``elapsed_time_per_iteration_ms``, ``iter_time_ms``,
``step_time_ms``: milliseconds, Megatron's), a data wait (``data_wait_s``, ``data_time``)
or the memory columns of the wire (``mem_allocated``, ``mem_reserved``, ``mem_total``),
gives per step ``(ts, timing)``, what `RunMonitor.update_loss` takes (with step times and
no wall time, their sum stands in for ``ts``); any other file, the per-iteration times a
trainer printed (`log_stdout`: Megatron-LM, nanoGPT). Read apart from
the loss (``logs.py``): the detection of the loss never depends on it.
"""

from __future__ import annotations

import csv
import io
import json

from . import log_stdout
from .log_table import STEP_COLS

TS_COLS = ("ts", "timestamp", "time", "wall_time", "_timestamp", "wall time")
# name -> factor to seconds
STEP_TIME_COLS = {"step_time_s": 1.0, "step_time": 1.0, "iter_time": 1.0, "time_per_iter": 1.0,
                  "dt": 1.0, "elapsed_time_per_iteration_ms": 1e-3, "iter_time_ms": 1e-3,
                  "step_time_ms": 1e-3}
WAIT_COLS = {"data_wait_s": 1.0, "data_time": 1.0, "data_wait_ms": 1e-3}
MEM_COLS = ("mem_allocated", "mem_reserved", "mem_total")


def _num(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x else None


def _pick(names, wanted):
    low = {str(n).strip().lower(): n for n in names}
    for w in wanted:
        if w in low:
            return low[w]
    return None


def _rows(path: str):
    if not path.endswith((".jsonl", ".ndjson", ".csv")):
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if path.endswith((".jsonl", ".ndjson")):
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    yield row
        return
    if path.endswith(".csv"):
        yield from csv.DictReader(io.StringIO(text))


def read_timing(path: str) -> dict[int, tuple] | None:
    """step -> (ts, timing dict or None[, tokens]); None when the log has no such column.
    A file that is no CSV, JSONL or JSON: the times a trainer printed (`log_stdout`)."""
    if not path.endswith((".jsonl", ".ndjson", ".csv", ".json")):
        return _printed(path)
    return _columns(path)


def _printed(path: str) -> dict[int, tuple] | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            printed = log_stdout.parse(f.read())
    except OSError:
        return None
    return printed[2] or None if printed is not None else None


def _columns(path: str) -> dict[int, tuple] | None:
    out: dict[int, tuple] = {}
    cols = None
    clock, last = 0.0, None     # no wall time: the step times summed stand in for it
    for row in _rows(path):
        if cols is None:
            names = list(row)
            cols = (_pick(names, STEP_COLS), _pick(names, TS_COLS),
                    _pick(names, tuple(STEP_TIME_COLS)), _pick(names, tuple(WAIT_COLS)),
                    {m: _pick(names, (m,)) for m in MEM_COLS})
            if cols[0] is None or not (cols[1] or cols[2] or cols[3] or any(cols[4].values())):
                return None
        step_c, ts_c, st_c, wait_c, mem_c = cols
        step = _num(row.get(step_c))
        if step is None:
            continue
        timing = {}
        if st_c is not None and _num(row.get(st_c)) is not None:
            timing["step_time_s"] = _num(row[st_c]) * STEP_TIME_COLS[st_c.strip().lower()]
        if wait_c is not None and _num(row.get(wait_c)) is not None:
            timing["data_wait_s"] = _num(row[wait_c]) * WAIT_COLS[wait_c.strip().lower()]
        for m, c in mem_c.items():
            if c is not None and _num(row.get(c)) is not None:
                timing[m] = _num(row[c])
        ts = _num(row.get(ts_c)) if ts_c is not None else None
        if ts is None and "step_time_s" in timing:
            clock += timing["step_time_s"] * (step - last if last is not None and step > last else 1)
            ts = clock
        last = step
        out[int(step)] = (ts, timing or None)
    return out or None
