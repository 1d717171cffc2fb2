"""The real-log corpus as the harness and the tests see it: files, labels, sources, presets.

Both folders of ``../shared/data`` (``real-logs``, ``real-logs-lr``) and our own small
runs (`own_runs`). Each log belongs to one *group*, its source: the repository, except
in the MLPerf repositories, where it is the submitter's system named in the file, and
``modded-nanogpt`` is one group. Leave-one-source-out calibration holds out one group
at a time. A fine-tune (``kind`` "finetuning" in the manifest) runs under the
``finetuning`` preset, as a user would run it (``wtwin monitor --preset finetuning``).
"""

from __future__ import annotations

import csv
import os
import pathlib
import re
from dataclasses import dataclass

import pytest

from wtwin.detect.resolution import NONE, RAW, decimals

TRANSFORMS = ("x0.01", "x100", "+1000", "every10th", "twice", "gap20", "resume")
SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
FOLDERS = ("real-logs", "real-logs-lr", "real-logs-3")
# the preset a user would pick for a manifest's ``kind`` (docs/PRESETS.md)
PRESET_OF_KIND = {"finetuning": "finetuning", "vision-language": "finetuning"}
# losses that are not meant to fall (RL value and policy losses, GAN losses): judged by
# the `stationary` preset, whose bar tests/bench/stationary.py calibrates on them; left out
# of this corpus, whose procedure calibrates the gates of losses that fall
NOT_MEANT_TO_FALL = ("rl", "gan")


@dataclass(frozen=True)
class Entry:
    name: str
    path: pathlib.Path | None     # None: one of our own runs (built by `own_runs`)
    label: str                    # clean, unknown or anomalous
    group: str
    preset: str


def _group(name: str, repo: str) -> str:
    m = re.match(r"mlperf\d+_+[a-z0-9]+_(.+?)_r(?:esult)?\d", name)
    if m:                                        # MLPerf: the submitter's system
        return "mlperf:" + m.group(1)
    return repo or name


def manifest_rows():
    """``(path, row)`` of every log the manifests of ../shared/data list and that exists."""
    for folder in FOLDERS:
        man = SHARED / folder / "manifest.csv"
        if not man.exists():
            continue
        with open(man) as fh:
            for r in csv.DictReader(fh):
                path = SHARED / folder / r["file"]
                if path.exists():
                    yield path, r


def entries(own: bool = True) -> list[Entry]:
    """Every log of the corpus (and our own runs); empty when ../shared is absent."""
    out = []
    for path, r in manifest_rows():
        if r.get("kind") in NOT_MEANT_TO_FALL:
            continue
        preset = PRESET_OF_KIND.get(r.get("kind", ""), "pretraining")
        out.append(Entry(r["file"], path, r["label"], _group(r["file"], r["repo"]), preset))
    if own:
        from own_runs import RUNS
        out += [Entry(n, None, "clean", "own:load_digits", p) for n, p in RUNS.items()]
    return sorted(out, key=lambda e: e.name)


def require_data() -> None:
    """Skip without ../shared/data, except under CI, where its absence is a failure."""
    if all((SHARED / f).is_dir() for f in FOLDERS):
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the real logs are missing at {SHARED}")
    pytest.skip(f"no real logs at {SHARED}")


def printed(loss: list) -> int:
    """The decimals a log's loss events are printed with (`RAW`: not rounded)."""
    d = NONE
    for ev in loss:
        d = decimals(d, ev[2])
        if d >= RAW:
            break
    return d


def transform(events: list, how: str) -> list:
    """A clean log as it might also arrive: scaled, offset, thinned, logged twice, with a
    20% gap, or crashed at 70% and resumed from a checkpoint at 50%. A rounded log stays
    rounded: scaled or offset, it prints the same digits (x0.01 two decimals more)."""
    loss = [ev for ev in events if ev[0] == "loss"]
    steps = [ev[1] for ev in loss]
    if how in ("x0.01", "x100", "+1000"):
        f = {"x0.01": lambda v: v * 0.01, "x100": lambda v: v * 100, "+1000": lambda v: v + 1000}[how]
        d = printed(loss)
        if d < RAW:
            places = max(0, d + {"x0.01": 2, "x100": -2, "+1000": 0}[how])
            return [(k, s, round(f(v), places), lr) for k, s, v, lr in events]
        return [(k, s, f(v), lr) for k, s, v, lr in events]
    if how == "every10th":
        keep = set(steps[::10])
        return [ev for ev in events if ev[0] != "loss" or ev[1] in keep]
    if how == "twice":
        return [x for ev in events for x in ((ev, ev) if ev[0] == "loss" else (ev,))]
    lo, hi = steps[0], steps[-1]
    if how == "gap20":
        a, b = lo + 0.4 * (hi - lo), lo + 0.6 * (hi - lo)
        return [ev for ev in events if not (ev[0] == "loss" and a <= ev[1] < b)]
    if how == "resume":       # crash at 70%, resume from a checkpoint at 50%, repeat
        c, r = lo + 0.7 * (hi - lo), lo + 0.5 * (hi - lo)
        head = [ev for ev in events if ev[1] <= c]
        return head + [ev for ev in events if ev[1] >= r]
    raise ValueError(how)
