"""`replay.scan` (what ``wtwin monitor`` runs) gives what `replay.replay` gives, event by
event: the same alert transitions, loss count and series, on real logs with lr, grad
norms, eval rows and resumes, with and without a cooldown holding firings back."""

from __future__ import annotations

import math

import pytest
from helpers import need_shared_data

from wtwin.offline.logs import read_log
from wtwin.detect.replay import replay, scan

LOGS = ["real-logs/llmc__HectorFCardenas_gpt2_124M_job11672255_nan.csv",
        "real-logs/mlperf10__bert_supermicro_as2124gq_result6_aborted_diverged.csv",
        "real-logs/mng__2024-06-06_AdamW_baseline_f66d43d7.csv",
        "real-logs-lr/mlperf20_maskrcnn_h3c_r4_nan_frozen.csv",
        "real-logs-lr/paddle_InvDN_step_resumed.csv",
        "real-logs-lr/hf_Dheena731_tinyllama_sft.csv",
        "real-logs-lr/hf_akhmetvaleev_whisper_bashkir.csv"]


def _nan_safe(row):
    return tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in row)


@pytest.mark.parametrize("name", LOGS)
@pytest.mark.parametrize("cooldown_s", [0.0, 50.0])
def test_scan_is_replay_without_the_objects(name, cooldown_s):
    log = read_log(need_shared_data() / name)
    events = list(log.events(with_grad=True))
    steps = [r for r in replay(events, run="r", cooldown_s=cooldown_s)]
    series = []
    transitions, n = scan(events, run="r", cooldown_s=cooldown_s, series=series)
    assert [a.to_dict() for a in transitions] == [a.to_dict() for r in steps for a in r.alerts]
    assert n == sum(r.kind == "loss" for r in steps) > 0
    assert [_nan_safe(s) for s in series] == [
        _nan_safe((r.step, r.value, r.state.l_pred, r.state.band_lo, r.state.band_hi, r.state.W))
        for r in steps if r.kind == "loss"]


def test_a_cooldown_holds_firings_back_under_scan():
    """The comparison above runs the policy's held-firing path: on this log a cooldown
    of 50 events holds some spikes back (and merges their episodes)."""
    events = list(read_log(need_shared_data() / LOGS[2]).events(with_grad=True))
    free, held = scan(events, run="r")[0], scan(events, run="r", cooldown_s=50.0)[0]
    assert len(held) < len(free)
    assert any(a.kind == "spike" for a in held)


def test_four_item_events_and_an_empty_stream():
    events = [("loss", t, 2.0 + 1 / t, None) for t in range(1, 50)] + [("eval", 49, 2.1, None)]
    assert scan(events) == ([], 49)
    assert scan([]) == ([], 0)
