"""The detection goals on the real logs: clean runs silent, anomalous runs caught."""

from __future__ import annotations

import csv
import math
import os
import pathlib

import pytest

from wtwin.detect import RunMonitor
from wtwin.offline.logs import read_log

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real-logs"
if not DATA.is_dir():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"CI=true but the real logs are absent at {DATA}")
    pytest.skip("../shared/data is absent", allow_module_level=True)

LABELS = {r["file"]: r["label"] for r in csv.DictReader(open(DATA / "manifest.csv"))}
PAGE = ("warning", "critical")


def pages(name):
    """Every warning/critical finding that became active: (step, kind)."""
    log, mon, out = read_log(DATA / name), RunMonitor("pretraining"), []
    for kind, step, v, lr in log.events():
        st = mon.update_loss(step, v, lr) if kind == "loss" else mon.update_eval(step, {"val_loss": v})
        out += [(f.step, f.kind) for f in (st.findings if st else ()) if f.active and f.severity in PAGE]
    return out, log


@pytest.mark.parametrize("name", sorted(n for n, lab in LABELS.items() if lab != "anomalous"))
def test_clean_and_unknown_logs_raise_no_page(name):
    """Benign one-batch outliers, WSD warm-downs, LR steps: no warning or critical alert."""
    found, _ = pages(name)
    assert found == []


@pytest.mark.parametrize("name", sorted(n for n, lab in LABELS.items() if lab == "anomalous"))
def test_anomalous_logs_caught(name):
    found, log = pages(name)
    assert found, name
    first_bad = next((s for _, s, v, _ in log.events() if not math.isfinite(v)), None)
    if first_bad is not None:   # NaN runs: critical at the first non-finite step
        assert found[0] == (first_bad, "nonfinite")
    elif "stuck" in name or "lateescape" in name:
        assert found[0][1] == "plateau" and found[0][0] <= 5000
    elif "diverged" in name:
        kinds = {k for _, k in found}
        assert "plateau" in kinds and "divergence" in kinds


def train_points(name):
    """The log's finite train losses, ``[(step, loss), ...]``."""
    return [(s, v) for kind, s, v, _ in read_log(DATA / name).events()
            if kind == "loss" and math.isfinite(v)]


def replay(points):
    """Feed ``points`` to a fresh monitor: the pages (step, kind) and the resumes seen."""
    mon, out, resumes = RunMonitor("pretraining"), [], 0
    for s, v in points:
        for f in mon.update_loss(s, v).findings:
            resumes += f.kind == "resume_jump" and f.active
            if f.active and f.severity in PAGE:
                out.append((f.step, f.kind))
    return out, resumes


# The cases that paged before the detectors handled gaps (docs/DETECTION.md, "Resumes and gaps"):
# a noisy modded-nanogpt run (rise: one point after the rewind's gap became the level),
# a 1B run (spike: the noise scale collapsed onto one point), and the two BERT runs
# (plateau: a slope straddling the gap became the slowdown rule's reference).
RESUMES = [("mng__2024-06-06_AdamW_baseline_f66d43d7.csv", 6427, 5052),
           ("mng__2024-10-20_ScaleUp1B_c0078066.csv", 11132, 9954),
           ("mlperf07__bert_dgxa100_result6_success.csv", 7732, 5930),
           ("mlperf07__bert_dgx1_result0_success.csv", 8108, 5010)]


@pytest.mark.parametrize("name,crash,resume", RESUMES)
def test_clean_log_resumed_from_a_checkpoint_raises_no_page(name, crash, resume):
    """The run crashes at ``crash`` and resumes from its checkpoint at ``resume``,
    repeating the losses it had: no warning or critical alert, one resume_jump."""
    pts = train_points(name)
    out, resumes = replay([p for p in pts if p[0] <= crash] + [p for p in pts if p[0] >= resume])
    assert out == [] and resumes == 1


# Stretches that never arrived (a logging pause, an emitter's drops), cases of the
# harness's "benign gaps" that paged before the gap handling.
GAPS = [("mng__2024-06-06_AdamW_baseline_f66d43d7.csv", 2949, 3787),      # was drift
        ("mng__2024-10-29_Optimizers_Adam_95a9fd44.csv", 2103, 3128),     # was spike
        ("mlperf07__bert_dgxa100_result6_success.csv", 4170, 4338),       # was plateau
        ("mlperf07__gnmt_dgx1_result0.csv", 2408, 4166)]                  # was drift


@pytest.mark.parametrize("name,start,end", GAPS)
def test_clean_log_with_a_gap_raises_no_page(name, start, end):
    out, _ = replay([p for p in train_points(name) if not start <= p[0] < end])
    assert out == []


def test_clean_log_that_becomes_denser_raises_no_page():
    """Every 10th point for the first half, then every point (a log_every changed
    mid-run): `rise`'s best, set while its level was noisier, starts again."""
    pts = train_points("mlperf07__maskrcnn_dgxa100_result0.csv")
    half = len(pts) // 2
    out, _ = replay(pts[:half:10] + pts[half:])
    assert out == []
