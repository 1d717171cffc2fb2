"""What a framework callback left when it stopped training on an alert, for the gate.

``WTwinCallback`` (HF) and ``WTwinLightningCallback`` stop training on a firing alert at
or above their ``stop_on``; the log they leave then ends before the loss went bad (a NaN
that stopped training is not in ``trainer_state.json``). So they also leave the alert
(`wtwin.emitters.framework`): in HF's ``log_history`` as ``{"step": N, "wtwin_stopped":
RECORD}``, and in ``wtwin_stop.json`` in the run's output folder. ``found`` reads both
(the file beside the log, or beside the ``checkpoint-N`` folder the log is in) and gives
them as alerts, so ``wtwin monitor --fail-on`` fails a run the callback stopped.

>>> alert_of({"kind": "nonfinite", "severity": "critical", "step": 37, "stopped_at_step": 37,
...           "message": "loss is NaN"}, "trainer_state.json")["message"]
'training was stopped at step 37 by the wtwin callback on this alert: loss is NaN'
"""

from __future__ import annotations

import json
import os

from wtwin.detect.alert import KINDS, SEVERITIES

from .logs import STOP_KEY, LogError

STOP_FILE = "wtwin_stop.json"   # as wtwin.emitters.framework writes it
MAX_BYTES = 65536


def found(path: str, log_meta: dict) -> list[dict]:
    """The stop records for the log at ``path``: from its ``log_history`` (already taken
    out of the rows into ``log_meta[STOP_KEY]`` by the reader) and the file beside it,
    as alerts (one per distinct record)."""
    records = [(rec, path) for rec in log_meta.get(STOP_KEY) or ()]
    records += [(_read(file), file) for file in _beside(path)]
    out, seen = [], set()
    for rec, where in records:
        alert = alert_of(rec, where)
        key = (alert["kind"], alert["step"], alert["severity"])
        if key not in seen:
            seen.add(key)
            out.append(alert)
    return out


def alert_of(rec, where: str) -> dict:
    """One record as an alert of ``wtwin monitor``; a record that is not one: LogError."""
    if not isinstance(rec, dict):
        raise LogError(f"{where}: a {STOP_KEY} record is not a JSON object.")
    kind, sev = rec.get("kind"), rec.get("severity")
    step, at = rec.get("step"), rec.get("stopped_at_step")
    if kind not in KINDS or sev not in SEVERITIES or not _step(at) or not (step is None or _step(step)):
        raise LogError(f"{where}: the {STOP_KEY} record is not one the wtwin callback writes "
                       f"(kind {kind!r}, severity {sev!r}, step {step!r}, stopped_at_step {at!r}).")
    message = str(rec.get("message") or "")[:500]
    return {"step": int(step if step is not None else at), "kind": kind, "severity": sev,
            "message": f"training was stopped at step {int(at)} by the wtwin callback on this "
                       f"alert: {message}".rstrip(": "), "stopped_at_step": int(at)}


def _step(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2 ** 53


def _beside(path: str) -> list[str]:
    """wtwin_stop.json in the log's folder, and in the folder above a checkpoint-N one."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    where = [folder]
    if os.path.basename(folder).startswith("checkpoint-"):
        where.append(os.path.dirname(folder))
    return [f for f in (os.path.join(d, STOP_FILE) for d in where) if os.path.isfile(f)]


def _read(file: str):
    try:
        with open(file, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise LogError(f"{file}: larger than {MAX_BYTES} bytes; the wtwin callback writes "
                           f"a few hundred.")
        doc = json.loads(raw)
    except (OSError, ValueError) as e:
        raise LogError(f"{file}: cannot read the callback's stop record: {e}.") from None
    if not isinstance(doc, dict) or STOP_KEY not in doc:
        raise LogError(f"{file}: expected {{\"{STOP_KEY}\": {{...}}}}, as the wtwin callback writes it.")
    return doc[STOP_KEY]
