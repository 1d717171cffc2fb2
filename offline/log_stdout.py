"""Training logs as the trainers print them to stdout: Megatron-LM and nanoGPT.

- Megatron-LM (``training_log``), one line per ``log_interval`` iterations::

     [2024-05-01 10:00:00] iteration      100/  500000 | consumed samples:        51200 |
     elapsed time per iteration (ms): 412.3 | learning rate: 1.500000E-04 | global batch
     size:   512 | lm loss: 3.210000E+00 | loss scale: 1.0 | grad norm: 0.512 | ...

  (one line in the log); the loss is ``lm loss`` (else the first ``... loss`` field but
  ``loss scale``), the lr ``learning rate``, the step time ``elapsed time per iteration
  (ms)`` (the interval's mean), the token count ``consumed tokens`` where printed
  (Megatron-DeepSpeed), the wall time the bracketed date where printed; ``validation loss
  at iteration N | lm loss value: ...`` lines are the validation loss.
- nanoGPT (``train.py``): ``iter 100: loss 3.2100, time 412.30ms, mfu 35.12%`` (``time``
  is that one iteration's, evaluation and checkpoint included) and ``step 2000: train
  loss 3.1000, val loss 3.2000`` (the validation loss).

Hugging Face's Trainer prints its ``log_history`` dicts without a step or a time per
step (``trainer_state.json`` is read by ``logs.py``; it has no time per step either).

``parse(text)`` gives the rows (``step``, ``loss``, ``val_loss``, ``lr``, ``grad_norm``)
and, per step, ``(ts, timing)`` for ``wtwin monitor --timing`` (`log_timing`); ``logs.py``
tries it only on a file no CSV or JSON reading could read, so that a log read before
reads the same.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

NAMES = ["step", "loss", "val_loss", "lr", "grad_norm"]
_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
MEGATRON = re.compile(r"^\s*(?:\[(?P<date>[\d-]+ [\d:.]+)\])?\s*iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|(?P<rest>.*)$")
MEGATRON_VAL = re.compile(r"validation loss at iteration\s+(?P<step>\d+)[^|]*\|(?P<rest>.*)$")
NANOGPT = re.compile(rf"^iter (?P<step>\d+): loss (?P<loss>{_NUM}), time (?P<ms>{_NUM})ms")
NANOGPT_VAL = re.compile(rf"^step (?P<step>\d+): train loss {_NUM}, val loss (?P<val>{_NUM})")


def _fields(rest: str) -> dict[str, str]:
    """``key: value |`` pairs of a Megatron line, keys lowercased."""
    out = {}
    for part in rest.split("|"):
        key, sep, value = part.rpartition(":")
        if sep and key.strip():
            out[key.strip().lower()] = value.strip()
    return out


def _float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _megatron(m: re.Match, rows: list, times: dict) -> None:
    f = _fields(m["rest"])
    loss_key = "lm loss" if "lm loss" in f else next(
        (k for k in f if k.endswith("loss") and k != "loss scale"), None)
    step = int(m["step"])
    if loss_key is not None and _float(f[loss_key]) is not None:
        rows.append({"step": step, "loss": f[loss_key], "lr": f.get("learning rate"),
                     "grad_norm": f.get("grad norm")})
    timing = {}
    ms = _float(f.get("elapsed time per iteration (ms)"))
    if ms is not None:
        timing["step_time_s"] = ms * 1e-3
    ts = None
    if m["date"]:
        try:
            ts = datetime.fromisoformat(m["date"]).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            ts = None
    tokens = _float(f.get("consumed tokens"))
    if timing or ts is not None:
        times[step] = (ts, timing or None, tokens)


def parse(text: str) -> tuple[str, list[dict], dict] | None:
    """(format, rows, step -> (ts, timing, tokens)) of a Megatron or nanoGPT stdout log;
    None when no line of either is in ``text``."""
    rows: list[dict] = []
    times: dict = {}
    fmt = None
    for line in text.splitlines():
        if (m := MEGATRON.match(line)) is not None:
            fmt = fmt or "megatron"
            _megatron(m, rows, times)
        elif (m := MEGATRON_VAL.search(line)) is not None:
            val = _fields(m["rest"]).get("lm loss value")
            if _float(val) is not None:
                rows.append({"step": int(m["step"]), "val_loss": val})
        elif (m := NANOGPT.match(line)) is not None:
            fmt = fmt or "nanogpt"
            rows.append({"step": int(m["step"]), "loss": m["loss"]})
            times[int(m["step"])] = (None, {"step_time_s": float(m["ms"]) * 1e-3}, None)
        elif (m := NANOGPT_VAL.match(line)) is not None:
            rows.append({"step": int(m["step"]), "val_loss": m["val"]})
    if fmt is None:
        return None
    return fmt, rows, _clocked(times)


def _clocked(times: dict) -> dict:
    """Each step's ``ts``: the printed date where there is one, else the step times
    summed (what `log_timing` does for a CSV with step times and no wall time)."""
    out, clock, last = {}, 0.0, None
    for step in sorted(times):
        ts, timing, tokens = times[step]
        if ts is None and timing:
            clock += timing["step_time_s"] * (step - last if last is not None and step > last else 1)
            ts = clock
        last = step
        out[step] = (ts, timing, tokens)
    return out
