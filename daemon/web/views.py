"""JSON views of the run table for the web pages: plain dicts, safe to show in a browser.

What a page may see: run names, statuses, numbers, alert kinds/severities/messages, the
plot series, checkpoint *names* (never their directories) and a filtered run config
(numbers, booleans and short words; nothing that looks like a path, URL or secret).
Non-finite numbers become ``None`` (JSON has no NaN); the series say where a loss was
missing with ``None`` too, and the ``nonfinite`` alert says why.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Iterable

from wtwin.detect.alert import SEVERITIES
from wtwin.detect.messages import RUNBOOKS

from ..series import TRAIN_FIELDS
from .forecast_wait import forecast_wait

STATE_FIELDS = ("l_pred", "band_lo", "band_hi", "D", "Q", "T", "W")
STATUSES = ("running", "stalled", "idle", "completed", "failed", "killed", "stopped")
SPARK_POINTS = 48
LAYER_FIELDS = ("name", "kind", "alpha", "alpha_weighted", "num_pl_spikes", "status")
_SECRETISH = re.compile(r"(secret|token|passw|key|auth|cred|url|uri|path|dir|file|host|endpoint)", re.I)
_PATHISH = re.compile(r"(?<![\w.])(?:~|[A-Za-z]:)?[/\\](?:[\w.\-]+[/\\])*[\w.\-]+"   # absolute
                      r"|(?:[\w.\-]+[/\\]){2,}[\w.\-]+")                             # a/b/c


_RUNBOOK = re.compile("(" + re.escape(RUNBOOKS) + r"\w+\.md)")


def num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def scrub(text: str) -> str:
    """Replace every path-like token in ``text`` by its last component; a page's runbook
    link (`messages.RUNBOOKS`) stays whole."""
    parts = _RUNBOOK.split(str(text))
    return "".join(p if i % 2 else _PATHISH.sub(lambda m: re.split(r"[/\\]", m.group(0))[-1], p)
                   for i, p in enumerate(parts))


def alert_view(a: Any) -> dict[str, Any]:
    return {"kind": a.kind, "severity": a.severity, "status": a.status, "step": a.step,
            "started_at": num(a.started_at), "message": scrub(a.message),
            "details": scrub(getattr(a, "details", ""))}


def status_of(r: Any) -> str:
    return "stalled" if r.status == "running" and getattr(r, "stalled", False) else r.status


def nonfinite_text(x: Any) -> str | None:
    """"NaN", "inf" or "-inf" for a non-finite number (JSON carries it as null)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isfinite(x):
        return None
    return "NaN" if x != x else ("inf" if x > 0 else "-inf")


def spark_values(points: list, n: int = SPARK_POINTS) -> list[float | None]:
    """The losses of a run's sparkline points, at most ``n`` (evenly picked), JSON-safe."""
    if len(points) > n:
        points = [points[round(i * (len(points) - 1) / (n - 1))] for i in range(n)]
    return [num(p[1]) for p in points]


def run_summary(r: Any) -> dict[str, Any]:
    firing = sorted(r.policy.firing.values(), key=lambda a: -SEVERITIES.index(a.severity))
    counts = {s: 0 for s in SEVERITIES}
    for a in firing:
        counts[a.severity] += 1
    return {"run": r.run, "status": status_of(r), "step": r.step, "loss": num(r.loss),
            "loss_nonfinite": nonfinite_text(r.loss),
            "lr": num(r.lr), "first_seen": num(r.first_seen), "last_seen": num(r.last_seen),
            "alerts": counts, "firing": [alert_view(a) for a in firing], "fired": {},
            "spark": spark_values(r.spark.points()), "live": True}


def stored_summary(d: dict[str, Any]) -> dict[str, Any]:
    """A run the store holds and memory no longer does (`store.history`), as a summary.
    A stored ``running`` run went silent for ``runs.idle_ttl_s``: it is ``idle``."""
    return {"run": d["run"], "status": "idle" if d["status"] == "running" else d["status"],
            "step": d["step"], "loss": num(d["loss"]), "loss_nonfinite": nonfinite_text(d["loss"]),
            "lr": num(d["lr"]), "first_seen": num(d["first_seen"]), "last_seen": num(d["last_seen"]),
            "alerts": {s: 0 for s in SEVERITIES}, "firing": [],
            "fired": {k: v for k, v in d["fired"].items() if k in SEVERITIES},
            "spark": spark_values(d["spark"]), "live": False}


def stored_detail(d: dict[str, Any]) -> dict[str, Any]:
    """A stored run's page: its whole history as the store keeps it (min/max buckets,
    ``store/envelope.py``); a run stored before that has its 64-point sparkline."""
    out = stored_summary(d)
    series = d.get("series")
    if series is None:
        pts = d["spark"]
        series = {f: [None] * len(pts) for f in TRAIN_FIELDS}
        series.update(step=[num(p[0]) for p in pts], loss=[num(p[1]) for p in pts])
    evals = d.get("eval") or {"step": [], "val_loss": []}
    out.update(preset=d["preset"], config=safe_config(d["config"]), state=None,
               last_eval={k: num(v) for k, v in d["last_eval"].items() if isinstance(k, str)},
               forecast_wait=None, series=series, eval=evals, scalars=d.get("scalars") or {},
               timing=d.get("timing"),
               markers=[dict(m, message=scrub(m["message"]), details=scrub(m.get("details", ""))) for m in d["markers"]],
               spectral=None, rewinds=rewinds_view(d["rewinds"]), references=stored_references(d.get("references")))
    return out


def references_view(refs: Any, points: int = 512) -> dict[str, Any] | None:
    """The run's references for its page (docs/REFERENCES.md): names, group, the last
    comparison, and each reference's curve (at most ``points`` points) to overlay."""
    if refs is None:
        return None
    v = refs.verdict()
    curves = {}
    for c in refs.tracker.references if refs.tracker is not None else ():
        k = max(1, -(-len(c.steps) // points))
        curves[c.name] = {"step": list(c.steps[::k]), "loss": [num(x) for x in c.losses[::k]]}
    return {"names": list(refs.names), "group": refs.group, "curves": curves,
            "verdict": None if v is None else {"state": v.state, "reference": v.reference, "gap": num(v.gap),
                                               "units": num(v.units), "message": scrub(v.message)}}


def stored_references(refs: Any) -> dict[str, Any] | None:
    """A stored run's references: the names and group it asked for (no curves, no verdict)."""
    if not isinstance(refs, dict) or not isinstance(refs.get("names"), list):
        return None
    group = refs.get("group")
    return {"names": [n for n in refs["names"] if isinstance(n, str)][:8],
            "group": group if isinstance(group, str) else None, "curves": {}, "verdict": None}


def rewinds_view(recs: Iterable[dict]) -> list[dict[str, Any]]:
    out = []
    for rec in recs:
        ck = rec.get("checkpoint")
        out.append({"at": num(rec.get("at")), "step": rec.get("step"), "from_step": rec.get("from_step"),
                    "kind": rec.get("kind") if isinstance(rec.get("kind"), str) else None,
                    "lr_scale": num(rec.get("lr_scale")), "count": rec.get("count"),
                    "checkpoint": os.path.basename(scrub(ck)) if isinstance(ck, str) else None})
    return out


def matches(summary: dict[str, Any], statuses: set[str], q: str) -> bool:
    return ((not statuses or summary["status"] in statuses)
            and (not q or q.lower() in summary["run"].lower()))


def safe_config(config: dict) -> dict[str, Any]:
    out = {}
    for k, v in list(config.items())[:50]:
        if not isinstance(k, str) or _SECRETISH.search(k):
            continue
        if isinstance(v, bool) or num(v) is not None:
            out[k] = v
        elif isinstance(v, str) and len(v) <= 64 and not re.search(r"[/\\:@]", v):
            out[k] = v
    return out


def run_detail(r: Any, spectral: Any = None) -> dict[str, Any]:
    s = r.last_state
    out = run_summary(r)
    series = r.series.train.columns()
    out.update(
        preset=r.preset,
        config=safe_config(r.config),
        state={f: num(getattr(s, f, None)) for f in STATE_FIELDS} if s is not None else None,
        last_eval={k: num(v) for k, v in r.last_eval.items() if isinstance(k, str)},
        forecast_wait=no_forecast(r.preset, series),
        series=with_earlier(series, r.spark.points()),
        eval=r.series.eval.columns(),
        scalars=r.scalars.columns() if r.scalars is not None else {},
        timing=r.series.timing.columns() if r.series.timing is not None else None,
        markers=[dict(m, message=scrub(m["message"]), details=scrub(m.get("details", ""))) for m in r.series.markers],
        spectral=spectral_view(spectral),
        rewinds=rewinds_view(r.rewinds),
        references=references_view(r.refs),
    )
    return out


def with_stored(out: dict[str, Any], rec: dict[str, Any] | None, live: dict[str, list]) -> dict[str, Any]:
    """A run restored from the store, as its page: the stored history (``rec``:
    ``history.run_record``) before the first point its plot series holds since the
    restore (``live``), and the stored alert transitions before the live ones, so the
    page right after a restart is the page the store gives once the run leaves memory.
    ``series_from``: the step the exact points begin at (before it: min/max buckets)."""
    if rec is None:
        return out
    out["scalars"] = with_stored_scalars(rec.get("scalars") or {}, out["scalars"])
    stored_timing, live_timing = rec.get("timing"), out["timing"]
    if stored_timing is not None:   # the stored time and memory before the live points
        live_timing = live_timing or {f: [] for f in stored_timing}
        out["timing"] = _before(stored_timing, live_timing,
                                live_timing["step"][0] if live_timing["step"] else math.inf)
    if rec.get("series") is None:
        return out
    first = live["step"][0] if live["step"] else math.inf
    out["series"] = _before(rec["series"], live, first)
    evals = out["eval"]
    out["eval"] = _before(rec.get("eval") or {"step": [], "val_loss": []}, evals,
                          evals["step"][0] if evals["step"] else first)
    seen = {(m["step"], m["kind"], m["status"], m["severity"]) for m in out["markers"]}
    older = [dict(m, message=scrub(m["message"]), details=scrub(m.get("details", "")))
             for m in rec.get("markers") or ()
             if (m["step"], m["kind"], m["status"], m["severity"]) not in seen]
    out["markers"] = older + out["markers"]
    out["series_from"] = None if first == math.inf else num(first)
    out["from_store"] = True
    return out


def with_stored_scalars(stored: dict[str, dict], live: dict[str, dict]) -> dict[str, dict]:
    """Each scalar's stored history before the first point its live series holds."""
    empty = {"step": [], "value": []}
    out = {}
    for name in sorted(set(stored) | set(live)):
        cols = live.get(name, empty)
        out[name] = _before(stored.get(name, empty), cols, cols["step"][0] if cols["step"] else math.inf)
    return out


def _before(stored: dict[str, list], live: dict[str, list], first: float) -> dict[str, list]:
    n = sum(1 for s in stored["step"] if s is not None and s < first)
    return {f: list(stored.get(f, [None] * len(stored["step"]))[:n]) + list(col)
            for f, col in live.items()}


def with_earlier(series: dict[str, list], spark: list) -> dict[str, list]:
    """The series with the sparkline's points from before its first step in front: after a
    daemon restart the plot series starts again empty, the stored sparkline does not."""
    first = series["step"][0] if series["step"] else math.inf
    early = [(s, v) for s, v in spark if s < first]
    if not early:
        return series
    out = {f: [None] * len(early) + col for f, col in series.items()}
    out["step"][:len(early)] = [num(s) for s, _ in early]
    out["loss"][:len(early)] = [num(v) for _, v in early]
    return out


def no_forecast(preset: str, series: dict[str, list]) -> dict[str, Any] | None:
    """Why no forecast is plotted yet and how long it waits, or None when one is."""
    if any(v is not None for v in series["l_pred"]) or not series["step"]:
        return None
    lr_known = any(v is not None for v in series["lr"])
    return forecast_wait(preset, series["step"], lr_known)


def spectral_view(res: Any) -> dict[str, Any] | None:
    """The latest spectral result of a run, whatever holds it.

    Accepts a `SpectralWatch` (its ``last``), a `SpectralSummary` (``layer_alpha``), a
    `JobResult`-like object or dict (``step``, ``path``, ``layers``), or a sequence of
    those (the newest last). Only the checkpoint's file name is ever shown.
    """
    if res is None:
        return None
    if isinstance(res, (list, tuple)):
        return spectral_view(res[-1]) if res else None
    if hasattr(res, "last") and hasattr(res, "update"):
        return spectral_view(res.last)
    get = res.get if isinstance(res, dict) else (lambda k, d=None: getattr(res, k, d))
    if get("layer_alpha", None) is not None:
        outside = set(get("outside", ()) or ())
        layers = [{"name": n, "alpha": num(a), "outside": n in outside} for n, a in get("layer_alpha")]
    else:
        layers = [_layer(lr) for lr in get("layers", ()) or ()]
    band = get("band", None)
    if band:
        for lr in layers:
            a = lr.get("alpha")
            lr["outside"] = a is not None and a > 0 and not band[0] <= a <= band[1]
    alphas = [lr["alpha"] for lr in layers if lr.get("alpha") is not None and lr["alpha"] > 0]
    mean = num(get("alpha_mean", None)) or (sum(alphas) / len(alphas) if alphas else None)
    path = get("path", None) or get("checkpoint", None)
    return {"step": get("step", None), "checkpoint": os.path.basename(str(path)) if path else None,
            "outcome": get("outcome", None), "error": scrub(get("error", "") or "") or None,
            "layers": layers, "mean_alpha": mean, "band": list(band) if band else None}


def _layer(lr: Any) -> dict[str, Any]:
    get = lr.get if isinstance(lr, dict) else (lambda k, d=None: getattr(lr, k, d))
    out = {}
    for f in LAYER_FIELDS:
        v = get(f, None)
        out[f] = v if isinstance(v, str) else num(v)
    return out


def run_list(table: Iterable[Any]) -> list[dict[str, Any]]:
    return ordered([run_summary(r) for r in table])


def ordered(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Most critical first, then live before stored, then most recently seen."""
    runs.sort(key=lambda d: (-d["alerts"]["critical"], -d["alerts"]["warning"], not d["live"],
                             -(d["last_seen"] or 0)))
    return runs
