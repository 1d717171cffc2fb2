"""`/api/analyze`: run the daemon's detectors over a dropped training log, on this machine.

The upload is streamed to a private temporary directory (at most ``MAX_UPLOAD_BYTES`` and
``MAX_ROWS`` lines, counted as the bytes arrive, within ``BODY_TIMEOUT_S``: a large CSV of
tiny rows costs far more memory than its size, and slow uploads would hold the slots),
read with `wtwin.offline.logs.read_log` (CSV, JSONL, ``trainer_state.json``) and replayed
through a fresh `RunMonitor` and `AlertPolicy`, exactly as live events would be, into the
same `RunSeries` the run page plots; a log whose loss looks smoothed is judged as ``wtwin
monitor`` judges it, on one point in as many as its smoothing spans (``smoothed``:
`wtwin.offline.smoothed`). Nothing is kept afterwards. A file that cannot be read
gives one readable sentence that starts with the file's name as the user called it (once:
the page shows the sentence as it is), never the temporary path. Without a preset the
same rule as ``wtwin monitor`` picks one.

The replay clock is the event index (one "second" per event) and the cooldown is zero, so
every transition the detectors make is shown.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from typing import Any

from wtwin.detect.alert import SEVERITIES

from wtwin.detect import PRESETS
from wtwin.detect.replay import Session
from wtwin.offline.logs import LogError, read_log
from wtwin.offline.checks import EPOCH_NOTE, choose_preset, step_note
from wtwin.offline import smoothed
from ..series import RunSeries
from .views import alert_view, num

MAX_UPLOAD_BYTES = 16 * 1024 * 1024
MAX_ROWS = 200_000        # lines of a CSV/JSONL upload (a trainer_state.json is bounded by bytes)
BODY_TIMEOUT_S = 30.0     # the whole upload must arrive within this
MAX_TRANSITIONS = 500


class AnalyzeError(ValueError):
    """A dropped file that cannot be analysed; the message is shown on the page."""


def display_name(filename: str | None) -> str:
    base = re.split(r"[/\\]", filename or "")[-1].strip()
    base = re.sub(r"[^\w.\- ()+,=@]", "_", base)[:120]
    return base or "uploaded file"


def analyze_file(path: str, name: str, preset: str | None, default: str = "pretraining") -> dict[str, Any]:
    """Read ``path`` and replay it; errors name ``name`` once, first. Runs in a worker thread.

    No ``preset``: the same rule as ``wtwin monitor`` (``wtwin.offline.checks.choose_preset``: a
    ``trainer_state.json`` that looks like a fine-tune is one), else ``default``."""
    if preset and preset not in PRESETS:
        raise AnalyzeError(f"{name}: preset must be one of {', '.join(PRESETS)}, not {preset!r}.")
    try:
        tlog = read_log(path)
    except LogError as e:
        raise AnalyzeError(str(e).replace(str(path), name)) from None
    chosen, source = choose_preset(tlog, preset or None)
    judged, thinned = smoothed.judged(tlog, None)     # as ``wtwin monitor`` judges it
    out = replay(judged, name, default if source == "default" else chosen)
    out["preset_from"] = "the page" if source == "--preset" else source
    if thinned:
        out["smoothed"] = dict(thinned, note=smoothed.note(thinned))
    if tlog.steps_in_epoch:            # a batch index that starts over each epoch
        out["steps_in_epoch"] = EPOCH_NOTE.format(col=tlog.step_col)
    if tlog.step_scale != 1:           # an epoch in fractions: the steps are it times this
        out["step_scale"] = {"column": tlog.step_col, "times": tlog.step_scale,
                             "note": step_note({"column": tlog.step_col, "times": tlog.step_scale})}
    return out


def replay(tlog, name: str, preset: str) -> dict[str, Any]:
    series = RunSeries(recent=4096, past=1024, markers=MAX_TRANSITIONS, keep=False)
    transitions: list[dict[str, Any]] = []
    dropped = 0
    session = Session(name, preset)
    for i, (kind, step, value, lr, grad) in enumerate(tlog.events(with_grad=True)):
        if kind == "loss":
            state, due = session.loss(step, value, lr, grad, now=float(i))
            series.add_loss(step, value, state, lr, grad)
        else:
            series.add_eval(step, {"val_loss": value})
            state, due = session.eval(step, {"val_loss": value}, now=float(i))
        for a in due:
            series.mark(a)
            if len(transitions) < MAX_TRANSITIONS:
                transitions.append(alert_view(a))
            else:
                dropped += 1
    return _result(tlog, name, preset, series, session.policy, transitions, dropped)


def _result(tlog, name, preset, series, policy, transitions, dropped) -> dict[str, Any]:
    firing = sorted(policy.firing.values(), key=lambda a: -SEVERITIES.index(a.severity))
    counts = {s: 0 for s in SEVERITIES}
    for t in transitions:
        if t["status"] == "firing":
            counts[t["severity"]] += 1
    last = tlog.records[-1]
    return {"file": name, "preset": preset, "points": len(tlog.records),
            "n_loss": tlog.n_loss, "n_val": tlog.n_val,
            "columns": {"step": tlog.step_col, "loss": tlog.loss_col, "val_loss": tlog.val_col,
                        "lr": tlog.lr_col, "grad_norm": tlog.grad_col},
            "step": last.step, "loss": num(last.loss if last.loss is not None else last.val_loss),
            "alerts": counts, "firing": [alert_view(a) for a in firing],
            "transitions": transitions, "transitions_dropped": dropped,
            "series": series.train.columns(), "eval": series.eval.columns(),
            "markers": list(series.markers)}


async def save_upload(request, tmpdir: str, timeout_s: float = BODY_TIMEOUT_S) -> tuple[str, str, str | None]:
    """Stream the request's file into ``tmpdir``: (path, display name, preset field),
    within ``timeout_s`` (``[http] body_timeout_s``)."""
    try:
        return await asyncio.wait_for(_save_upload(request, tmpdir), timeout_s)
    except asyncio.TimeoutError:
        raise AnalyzeError(f"the upload did not arrive within {timeout_s:g} s.") from None


async def _save_upload(request, tmpdir: str) -> tuple[str, str, str | None]:
    path = os.path.join(tmpdir, "upload")
    name, preset = display_name(request.query.get("name")), request.query.get("preset")
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        got = False
        while (part := await reader.next()) is not None:
            if part.name == "preset":
                preset = await _short_field(part, "preset")
            elif part.name == "file" and not got:
                name = display_name(part.filename)
                await _copy(part.read_chunk, path, name)
                got = True
        if not got:
            raise AnalyzeError("no file in the upload (send it as the form field \"file\").")
    else:
        await _copy(request.content.read, path, name)
    return path, name, preset


async def _short_field(part, name: str, limit: int = 64) -> str:
    """A small text field, read without holding more than ``limit`` bytes of it."""
    data = b""
    while chunk := await part.read_chunk(limit + 1):
        data += chunk
        if len(data) > limit:
            raise AnalyzeError(f"the form field {name!r} is longer than {limit} bytes.")
    return data.decode("utf-8", "replace").strip()


async def _copy(read, path: str, name: str) -> None:
    total = lines = 0
    with open(path, "wb") as fh:
        while chunk := await read(1 << 16):
            total += len(chunk)
            lines += chunk.count(b"\n")
            if total > MAX_UPLOAD_BYTES:
                raise AnalyzeError(f"{name}: the file is larger than {MAX_UPLOAD_BYTES >> 20} MiB.")
            if lines > MAX_ROWS:
                raise AnalyzeError(f"{name}: the file has more than {MAX_ROWS:,} rows; thin it (every k-th row) first.")
            fh.write(chunk)


def private_tmpdir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="wtwind-analyze-")
