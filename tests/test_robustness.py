"""Every clean real log stays silent however it arrives: scaled x0.01 and x100, offset by
+1000, logged every 10th step, every step twice, with a 20% gap, and resumed from a
checkpoint (the shipped defaults, through the one detection library)."""

import math

import pytest

from corpus import TRANSFORMS, entries, require_data, transform

from wtwin.detect.replay import alerts

QUIET = [e for e in entries(own=False) if e.label != "anomalous"]
# Known false pages, measured and left (docs/DETECTION.md, "Known limits"). Each must
# still page: a fix makes the test fail until the entry goes.
KNOWN: dict = {
    # (the MLPerf RNN-T (Dell) stall, 8200-12500 at a constant lr, paged `plateau` at 9773
    # as logged and under x0.01, x100, +1000 and resume until 2026-12-04 22:20: its level's
    # fall is now judged with its standard error, `monitor._stalled`)
    # (real-logs-3: a 20-epoch NER fine-tune printed at 4 decimals paged frozen_loader
    # critical and a hate-speech fine-tune that memorizes to 0.0 plateau, until the detectors
    # knew the print's resolution, detect/resolution.py; a DeBERTa fine-tune paged "no
    # learning" in its lr warm-up until the warm-up was the plateau rule's, rules.plateau)
}


def _no_learning_under_offset(how, page):
    """Two rules are exempt from the offset transform (docs/DETECTION.md, "Known limits"):
    "no learning" is judged on the fraction the loss fell, which an offset of +1000
    destroys; "frozen" counts a value repeated to single precision, and +1000 takes the
    changes of a loss that fell to 1e-4 below single precision at 1000 (a float32 trainer
    would print them as one value)."""
    return how == "+1000" and page[1] == "plateau" and (
        page[3].startswith("no learning") or page[3].startswith("logged loss frozen at"))


@pytest.fixture(scope="module", autouse=True)
def _data():
    require_data()


def _events(e):
    from wtwin.offline.logs import read_log
    return list(read_log(e.path).events())


@pytest.mark.slow  # 143 s over its parameters on 2 busy cores (make test-all, CI)
@pytest.mark.parametrize("e", QUIET, ids=[e.name for e in QUIET])
def test_clean_log_stays_silent_under_every_transform(e):
    events = _events(e)
    paged, known = {}, {}
    for how in TRANSFORMS + ("as logged",):
        stream = events if how == "as logged" else transform(events, how)
        pages = [(a.step, a.kind, a.severity, a.message) for a in alerts(stream, preset=e.preset)
                 if a.status == "firing" and a.severity != "info"]
        pages = [p[:3] for p in pages if not _no_learning_under_offset(how, p)]
        key = (e.name, how)
        if (e.name, "*") in KNOWN:
            if how == "as logged":
                known[how] = bool(pages)
        elif key in KNOWN:
            known[how] = bool(pages)
        elif pages:
            paged[how] = pages[:3]
    assert paged == {}
    assert all(known.values()), f"a known false page is gone, remove it from KNOWN: {known}"


def test_the_transforms_change_what_they_say():
    """The transforms are not no-ops (a test of the test)."""
    events = [("loss", s, 2.0 + 1.0 / s, None) for s in range(1, 101)]
    assert transform(events, "x100")[5][2] == pytest.approx(events[5][2] * 100)
    assert transform(events, "+1000")[5][2] == pytest.approx(events[5][2] + 1000)
    assert len(transform(events, "every10th")) == 10
    assert len(transform(events, "twice")) == 200
    assert len(transform(events, "gap20")) < 85
    steps = [ev[1] for ev in transform(events, "resume")]
    assert any(b < a for a, b in zip(steps, steps[1:]))


# --- the forecast itself, on fitted values (docs/DETECTION.md, "The forecast") -------------
SCALED = {"x0.01": (0.01, 0.0), "x100": (100.0, 0.0), "+1000": (1.0, 1000.0)}
# a forecast may differ by round-off of the map (1000 + loss keeps ~13 digits of loss)
REL = 1e-6


def _forecast(e, a: float = 1.0, b: float = 0.0, eps: float = 0.0, seed: int = 0):
    """The preset's forecast detector over the log's loss points mapped to ``a x + b`` (and
    relative noise ``eps``): its (l_pred, band_lo, band_hi, alert) at every point."""
    import random

    from wtwin.detect.base import REGISTRY
    from wtwin.detect.presets import PRESET_PARAMS

    name = "finetuning" if e.preset == "finetuning" else "forecast"
    det = REGISTRY[name](**PRESET_PARAMS[e.preset][name])
    rng, out = random.Random(seed), []
    for ev in _events(e):
        if ev[0] == "loss":
            v = ev[2] * (1.0 + eps * rng.gauss(0.0, 1.0)) if eps else ev[2]
            st = det.update(ev[1], a * v + b, ev[3])
            out.append((st.l_pred, st.band_lo, st.band_hi, st.alert))
    return out


FITTED = [e for e in QUIET if e.name in (
    "hf_O5-7_chatglm2_ptuning.csv",        # the x100 drift page of issue 22: lr, linear decay
    "hf_Dheena731_tinyllama_sft.csv",      # fine-tune, cosine lr
    "slm_akawslearn_pretrain.csv",         # pre-training with lr
    "llmc__SiddanthEmani_gpt2_124M_main.csv",   # pre-training, no lr column (power law)
)]


@pytest.mark.parametrize("e", FITTED, ids=[e.name for e in FITTED])
def test_the_forecast_is_the_transformed_forecast(e):
    """At x0.01, x100 and +1000 the forecast and the band's upper edge are the x1 ones
    mapped through the transform, within a relative tolerance of the run's range, at
    every point; and the drift verdict is the same."""
    ref = _forecast(e)
    losses = [ev[2] for ev in _events(e) if ev[0] == "loss" and math.isfinite(ev[2])]
    span = max(losses) - min(losses)
    assert sum(r[0] is not None for r in ref) > 50
    for how, (a, b) in SCALED.items():
        got = _forecast(e, a, b)
        for r, g in zip(ref, got):
            assert (r[0] is None) == (g[0] is None), how
            if r[0] is not None:
                assert g[0] == pytest.approx(a * r[0] + b, abs=REL * a * span), how
                assert g[2] == pytest.approx(a * r[2] + b, abs=REL * a * span), how
                assert g[3] == r[3], how


KNIFE = [e for e in FITTED if e.name == "hf_O5-7_chatglm2_ptuning.csv"]


@pytest.mark.parametrize("e", KNIFE, ids=[e.name for e in KNIFE])
def test_the_forecast_is_not_on_a_knife_edge(e):
    """Round-off (1e-9 of each loss, as another BLAS kernel's would be) moves the forecast
    and its band by round-off, not to another fit or another band: on main the band's
    edges moved by up to 0.7 here between seeds (a covariance inverted through its null
    space), and the issue's -162.9 forecast was one such draw extrapolated unbounded."""
    ref = _forecast(e)
    for seed in range(1, 13):
        got = _forecast(e, eps=1e-9, seed=seed)
        worst = max(max(abs(g[0] - r[0]), abs(g[2] - r[2])) for r, g in zip(ref, got)
                    if r[0] is not None)
        assert worst < 1e-5, seed
        assert [g[3] for g in got] == [r[3] for r in ref]


def test_the_forecast_stays_near_what_the_run_has_shown():
    """On every clean log the forecast and its band stay within REACH x the range of the
    points seen so far (beyond their extremes), and the band's lower edge is never below
    0 for a loss never seen below 0."""
    from wtwin.detect.forecast import REACH

    for e in QUIET:
        pts = [ev[2] for ev in _events(e) if ev[0] == "loss"]
        lo, hi = math.inf, -math.inf
        for v, (pred, blo, bhi, _) in zip(pts, _forecast(e)):
            if pred is not None:
                reach = REACH * (hi - lo) * (1 + 1e-9)
                assert lo - reach <= blo <= max(pred, 0.0) and pred <= bhi <= hi + reach, e.name
                assert blo >= 0.0 or lo < 0.0, e.name
            if math.isfinite(v):
                lo, hi = min(lo, v), max(hi, v)
