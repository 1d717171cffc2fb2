"""``wtwin``: the offline CLI. Runs the daemon's detectors over a finished log.

    wtwin monitor PATH [--preset P] [--loss-col C] [--json] [--plot out.png] [--all]
                       [--fail-on warning|critical] [--classes N | --chance LOSS]
                       [--reference REF ...] [--group SIBLING ...] [--timing] [--every N]
    wtwin demo

``--reference REF`` (repeatable): also page when the run falls behind these runs
(`wtwin.detect.reference`; offline/references.py). ``--group SIBLING ...``: the other
runs of its sweep, compared alike (the daemon compares a run with its group's siblings).

PATH: CSV, JSONL, trainer_state.json, a W&B or TensorBoard CSV export, Lightning's
metrics.csv, or TensorBoard event files (``log_formats.py``).

Exit status: 0 when the log was read (whatever it contains), 1 with ``--fail-on`` when an
alert at or above that severity was found, 2 when it cannot be read (one sentence on
stderr says why) or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from wtwin.detect import PRESETS, RunMonitor
from wtwin.detect.replay import scan
from wtwin.emitters.wire import KIND_PRESETS

from . import checks, plot, progress, references, smoothed, stops
from .chance_level import chance_level
from .log_timing import read_timing
from .logs import LogError, read_log

PAGE = ("warning", "critical")


def monitor_log(log, preset: str = "pretraining", keep_series: bool = False,
                include_info: bool = False, chance: float = 0.0, timing: bool = False) -> dict:
    """Replay ``log`` through the detection library (`wtwin.detect.replay.scan`: the daemon's
    detectors and alert policy); the result is what ``--json`` prints. ``alerts`` are
    the firing transitions, as the daemon would page them. ``chance``: the loss at chance
    (`wtwin.detect.chance`; 0.0: unknown)."""
    series = [] if keep_series else None
    overrides = {"chance": {"level": chance}} if chance else {}
    times = read_timing(str(getattr(log, "path", ""))) if timing else None
    transitions, n = scan(log.events(with_grad=True), run="offline", preset=preset, series=series,
                          times=times, **overrides)
    alerts = [{"step": int(a.step), "kind": a.kind, "severity": a.severity, "message": a.message,
               "details": a.details}
              for a in transitions if a.status == "firing" and (include_info or a.severity in PAGE)]
    pages = [a["step"] for a in alerts if a["severity"] in PAGE]
    out = {"alerts": alerts, "steps": n, "first_alert_step": min(pages) if pages else None,
           "preset": preset}
    if keep_series:
        out["_series"] = series
    return out


def _human(res: dict, path: str) -> str:
    lines = []
    if res["alerts"]:
        lines.append(f"{'step':>9}  {'kind':<12} {'severity':<9} message")
        for a in res["alerts"][:40]:
            lines.append(f"{a['step']:>9}  {a['kind']:<12} {a['severity']:<9} {a['message']}")
        if len(res["alerts"]) > 40:
            lines.append(f"... and {len(res['alerts']) - 40} more")
    pages = [a for a in res["alerts"] if a["severity"] in PAGE]
    if pages:
        first = min(pages, key=lambda a: a["step"])
        kinds = ", ".join(sorted({a["kind"] for a in pages}))
        lines.append(f"verdict: {len(pages)} alert(s) ({kinds}); first at step {first['step']} "
                     f"({first['kind']}, {first['severity']}) over {res['steps']} loss points "
                     f"of {path}")
    else:
        lines.append(f"verdict: no warning or critical alerts over {res['steps']} loss points "
                     f"of {path} (preset {res['preset']})")
    return "\n".join(lines)


def _monitor(a) -> int:
    if a.plot and not plot.available():
        print(f"wtwin: {plot.INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        log = read_log(a.path, loss_col=a.loss_col, run=a.run)
        refs = [references.read_reference(p, a.loss_col)
                for p in [*(a.reference or ()), *(a.group or ())]]
    except LogError as e:
        print(f"wtwin: {e}", file=sys.stderr)
        return 2
    try:
        res = analyse(log, a, refs)
    except LogError as e:   # a stop record beside the log that is not one (stops.py)
        print(f"wtwin: {e}", file=sys.stderr)
        return 2
    if a.plot:
        try:
            plot.plot(res, a.plot, a.path)
        except (OSError, ValueError) as e:
            print(f"wtwin: cannot write the plot {a.plot}: {e}", file=sys.stderr)
            return 2
    print(render(res, log, a))
    return 1 if checks.failed(res["alerts"], a.fail_on) else 0


def analyse(log, a, refs=()) -> dict:
    """The preset, the replay and the caveats: what ``--json`` prints (with ``_series``
    for ``--plot``). `_monitor` reads, analyses and renders; tests/bench/monitor_1m.py
    times the three apart with these same functions. ``refs``: reference runs
    (`ReferenceCurve`), whose ``behind`` pages join the alerts."""
    preset, source = checks.choose_preset(log, a.preset, getattr(a, "kind", None))
    chance, chance_from = chance_level(a.path, getattr(a, "classes", None), getattr(a, "chance", None))
    judged, thinned = smoothed.judged(log, getattr(a, "every", None))
    shown = progress.with_progress(judged, progress.wanted(a.json))
    res = monitor_log(shown, preset, keep_series=bool(a.plot), include_info=a.all, chance=chance,
                      timing=getattr(a, "timing", False))
    res["preset_from"] = source
    if log.step_scale != 1:
        res["step_scale"] = {"column": log.step_col, "times": log.step_scale}
    if log.steps_in_epoch:
        res["steps_in_epoch"] = True
    if thinned:
        res["smoothed"] = thinned
    if chance:
        res["chance"] = {"level": chance, "from": chance_from}
    res["caveats"] = checks.warmup_caveats(log, preset)
    stopped = stops.found(a.path, log.meta)   # the callback stopped training on these
    if stopped:
        res["stopped"] = stopped
        res["alerts"] = sorted(res["alerts"] + [x for x in stopped if a.all or x["severity"] in PAGE],
                               key=lambda x: x["step"])
        pages = [x["step"] for x in res["alerts"] if x["severity"] in PAGE]
        res["first_alert_step"] = min(pages) if pages else None
    if refs:
        found, last = references.behind(log, list(refs))
        res["alerts"] = sorted(res["alerts"] + [x for x in found if x.pop("status") == "firing"],
                               key=lambda x: x["step"])
        pages = [x["step"] for x in res["alerts"] if x["severity"] in PAGE]
        res["first_alert_step"] = min(pages) if pages else None
        res["reference"] = dict(last, names=[r.name for r in refs])
    return res


def render(res: dict, log, a) -> str:
    """One JSON document (``--json``) or the human lines: notes, caveats, alerts, verdict."""
    res = {k: v for k, v in res.items() if k != "_series"}
    if a.json:
        return json.dumps(res)
    note = checks.preset_note(res["preset"], res["preset_from"], log)
    ref = res.get("reference")
    notes = [note] if note else []
    if not getattr(a, "loss_col", None) and (named := checks.column_note(log)):
        notes.append(named)
    if res.get("step_scale"):
        notes.append(checks.step_note(res["step_scale"]))
    if res.get("steps_in_epoch"):
        notes.append(checks.EPOCH_NOTE.format(col=log.step_col))
    if res.get("smoothed"):
        notes.append(smoothed.note(res["smoothed"]))
    return "\n".join([*("note: " + n for n in notes),
                      *("caveat: " + c for c in res["caveats"]), _human(res, a.path),
                      *([f"reference: at the last step, {ref['state']}: {ref['message']}"] if ref else [])])


def demo_run(seed: int = 0, n: int = 10000, onset: int = 6000):
    """A synthetic pre-training run that starts drifting at ``onset``."""
    rng = random.Random(seed)
    for t in range(1, n + 1):
        drift = 2e-4 * (t - onset) if t > onset else 0.0
        yield t, 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05) + drift


def _demo(a) -> int:
    mon, onset = RunMonitor("pretraining"), 6000
    print(f"synthetic run: L = 2.6 + 9 t^-0.35 + noise (sd 0.05), "
          f"drifting up by 2e-4 per step from step {onset}")
    for t, loss in demo_run(onset=onset):
        st = mon.update_loss(t, loss)
        hit = next((f for f in st.findings if f.active and f.severity in PAGE), None)
        if hit:
            print(f"caught at step {t} ({hit.kind}, {hit.severity}), {t - onset} steps after onset: "
                  f"{hit.message}")
            return 0
    print("not caught")
    return 1


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    try:
        return _monitor(a) if a.cmd == "monitor" else _demo(a)
    except BrokenPipeError:          # `wtwin monitor log.csv | head`: not an error
        sys.stderr.close()
        return 0


def _every(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--every takes a whole number of points >= 1, got {text!r}")
    return n


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="wtwin", description="Run wtwin's detectors offline.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("monitor", help="run the detectors over a log (CSV, JSONL, trainer_state.json, "
                       "W&B or TensorBoard CSV export, Lightning metrics.csv, TensorBoard event files)")
    m.add_argument("path")
    m.add_argument("--preset", choices=list(PRESETS),
                   help="detector preset (default: pretraining; finetuning for a trainer_state.json "
                        "that looks like a fine-tune)")
    m.add_argument("--kind", choices=sorted(KIND_PRESETS),
                   help="what the run is, as a trainer's run_start says it: picks the preset "
                        "when --preset is not given (rl, gan, contrastive: stationary, a loss "
                        "not meant to fall)")
    m.add_argument("--loss-col",
                   help="column, TensorBoard scalar tag or W&B metric to use as the training loss")
    m.add_argument("--run", help="in a TensorBoard logdir of several runs, the run to read "
                                 "(its name as TensorBoard shows it: the folder under PATH)")
    m.add_argument("--json", action="store_true", help="one JSON document on stdout")
    m.add_argument("--plot", metavar="PNG", help="write loss, forecast band, W and alerts")
    m.add_argument("--all", action="store_true", help="also list info findings")
    m.add_argument("--timing", action="store_true",
                   help="also judge the run's time and memory from a CSV/JSONL log's wall-time, "
                        "step-time, data-wait or memory columns (throughput, memory)")
    m.add_argument("--fail-on", choices=("warning", "critical"),
                   help="exit 1 when an alert of this severity or worse is found (a CI gate)")
    m.add_argument("--group", nargs="+", metavar="SIBLING",
                   help="logs of the other runs of its sweep (the daemon's run_start group): "
                        "page when the run stays far behind its siblings at the same step "
                        "(another lr: a farther bar, and the message says so)")
    m.add_argument("--classes", type=int, metavar="N",
                   help="the classes the loss is over (vocabulary size, labels): page a loss "
                        "that sits at ln N, a uniform guess (default: the config.json beside "
                        "a trainer_state.json)")
    m.add_argument("--chance", type=float, metavar="LOSS",
                   help="the loss at chance, when it is not ln of a class count")
    m.add_argument("--reference", action="append", metavar="REF",
                   help="a log of a run this one should match (repeatable: several, or a "
                        "sweep's siblings); page when the run falls behind it")
    m.add_argument("--every", type=_every, metavar="N",
                   help="judge one loss point in N (default: 1, or, for a log whose loss "
                        "looks smoothed, an EMA or a running mean, the spacing its smoothing "
                        "lets go at: the note says which); 1 judges every point")
    sub.add_parser("demo", help="a synthetic drifting run, and where it is caught")
    return ap


if __name__ == "__main__":
    sys.exit(main())
