"""The ``stationary`` preset's run-away bar, chosen by the written procedure, and what it catches.

A loss not meant to fall (RL, GAN: the corpus's ``rl`` and ``gan`` logs, left out of the
harness's corpus) is judged on run-aways against its recent best (`divergence` with
``best_halflife``) and on sustained jumps (`spike`), in units of its own scatter. The
bar is the divergence's ``z``: the level must stand ``z`` one-point scatters
(``scale``) above its recent best for the detector's patience. The procedure is
calibrate.py's (nested leave-one-source-out, ``MARGIN`` x the largest clean value of the
other sources, never below the floor):

1. per clean or unknown log, the largest ``(level - best) / scale`` held over the
   detector's patience (at least two points): what ``z`` is compared with;
2. per source (repository), the largest over its logs;
3. ``z`` = max(floor, ``MARGIN`` x the largest of the other sources). The floor, 40, is
   a product choice: pretraining's 30 and a third more, because a loss that does not
   fall has no progress to weigh a rise against; its scatter is its only yardstick.

Then the injected failures on the same logs from 60% of their points: a sustained jump
of 30 point-scatters, a run-away growing 5% of a scatter per point compounded, a NaN; and
the same logs under ``pretraining``, to show what the preset spares them.

    .venv/bin/python tests/bench/stationary.py
"""

from __future__ import annotations

import math
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import calibrate  # noqa: E402
from corpus import NOT_MEANT_TO_FALL, SHARED, manifest_rows  # noqa: E402

from wtwin.detect import RunMonitor  # noqa: E402
from wtwin.detect.presets import PRESET_PARAMS  # noqa: E402
from wtwin.offline.logs import read_log  # noqa: E402

FLOOR = 40.0          # the smallest run-away that pages, in one-point scatters
ONSET = 0.6           # the injected failures start at this fraction of a log's points
INJECTIONS = ("jump", "runaway", "nan")


def logs() -> list[tuple[str, str, str, list[tuple[int, float]]]]:
    """(file, label, source, points) of every log not meant to fall in ../shared/data."""
    return sorted((r["file"], r["label"], r["repo"],
                   [(s, v) for k, s, v, *_ in read_log(str(path)).events() if k == "loss" and v is not None])
                  for path, r in manifest_rows() if r.get("kind") in NOT_MEANT_TO_FALL)


def held_runaway(pts: list[tuple[int, float]]) -> float:
    """The largest ``(level - best) / scale`` the log held over the divergence's patience
    (and two points), under ``stationary`` with its shipped ``z``."""
    m = RunMonitor("stationary")
    dv = m.detectors["divergence"]
    z, patience = dv.z, dv.patience
    hist: list[tuple[int, float]] = []
    top = 0.0
    for step, loss in pts:
        m.update_loss(step, loss)
        hist.append((step, dv.excess * z))
        win = [e for s, e in hist[-64:] if step - s <= patience]
        if len(win) < 2:
            win = [e for _, e in hist[-2:]]
        top = max(top, min(win))
    return top


def pages(pts: list[tuple[int, float]], preset: str = "stationary") -> list[tuple[str, str, int]]:
    m = RunMonitor(preset)
    out = []
    for step, loss in pts:
        for f in m.update_loss(step, loss).findings:
            if f.active and f.severity != "info":
                out.append((f.kind, f.severity, f.step))
    return out


def scatter(pts: list[tuple[int, float]]) -> float:
    """One point's scatter: the median absolute one-step change, as an sd."""
    return statistics.median(abs(b - a) for (_, a), (_, b) in zip(pts, pts[1:])) / 0.954


def inject(pts: list[tuple[int, float]], how: str) -> tuple[list[tuple[int, float]], int]:
    """``pts`` with the failure ``how`` from `ONSET`, and the onset's step."""
    on = int(len(pts) * ONSET)
    sd = scatter(pts)
    out = []
    for i, (step, loss) in enumerate(pts):
        k = i - on
        if k >= 0:
            if how == "jump":
                loss += 30.0 * sd
            elif how == "runaway":
                loss += sd * (1.05 ** k - 1.0)
            elif how == "nan" and k == 10:
                loss = math.nan
        out.append((step, loss))
    return out, pts[on][0]


def main() -> int:
    data = logs()
    if not data:
        print(f"no real logs at {SHARED}")
        return 1
    z = PRESET_PARAMS["stationary"]["divergence"]["z"]
    print(f"shipped z {z:g}, best_halflife "
          f"{PRESET_PARAMS['stationary']['divergence']['best_halflife']:g} steps\n")
    print("| log | label | held run-away | stationary pages | pretraining pages |")
    print("|---|---|---|---|---|")
    per_log = []
    for name, label, repo, pts in data:
        v = held_runaway(pts)
        per_log.append((repo, v))
        print(f"| {name} | {label} | {v:.1f} | {len(pages(pts))} | {len(pages(pts, 'pretraining'))} |")
    groups = calibrate.by_group(per_log)
    print(f"\nz chosen from every source: {calibrate.choose(groups, None, FLOOR):g}")
    print("\n| held-out source | its largest clean value | z it got | margin |")
    print("|---|---|---|---|")
    for g, (v, thr) in sorted(calibrate.margins(groups, FLOOR).items()):
        print(f"| {g} | {v:.1f} | {thr:g} | {thr / v if v > 0 else math.inf:.2f}x |")
    print("\n| log | scatter | " + " | ".join(INJECTIONS) + " |")
    print("|---|---|" + "---|" * len(INJECTIONS))
    for name, _label, _repo, pts in data:
        if len(pts) < 100 or scatter(pts) == 0.0:
            continue      # too short to inject into, or printed at one value
        cells = []
        for how in INJECTIONS:
            bad, onset = inject(pts, how)
            got = pages(bad)
            first = next(((k, s, st) for k, s, st in got if st >= onset), None)
            early = any(st < onset for _, _, st in got)
            cells.append("missed" if first is None else
                         f"{first[0]} {first[1]} +{(first[2] - onset):,} steps"
                         + (" (paged before)" if early else ""))
        print(f"| {name} | {scatter(pts):.3g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
