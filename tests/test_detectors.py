"""Unit tests of the detectors and the run monitor (synthetic, seeded streams)."""

from __future__ import annotations

import math
import random

import msgpack
import pytest

import lr_curves

from wtwin.detect import REGISTRY, RunMonitor, WTwinMonitor
from wtwin.detect.forecast import ForecastDetector, ForecastState
from wtwin.detect.plateau import PlateauDetector
from wtwin.detect.spike import SpikeDetector
from wtwin.daemon.errors import ConfigError


def curve(n=8000, seed=0, sd=0.05, drift_at=None, slope=2e-4, start=1):
    rng = random.Random(seed)
    for t in range(start, n + 1):
        d = slope * (t - drift_at) if drift_at is not None and t > drift_at else 0.0
        yield t, 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, sd) + d


def first_page(mon, stream):
    for t, v in stream:
        st = mon.update_loss(t, v)
        for f in st.findings:
            if f.active and f.severity in ("warning", "critical"):
                return t, f.kind
    return None, None


class TestForecast:
    def test_clean_power_law_is_silent(self):
        """A clean power-law curve with noise raises no drift."""
        det = ForecastDetector()
        assert not any(det.update(t, v).alert for t, v in curve(12000))

    def test_linear_drift_caught_after_onset(self):
        """A slow linear drift is caught within a few hundred steps of its onset."""
        det = ForecastDetector()
        hit = next(t for t, v in curve(12000, drift_at=6000) if det.update(t, v).alert)
        assert 6000 < hit < 6800

    def test_band_contains_prediction_and_scores_exported(self):
        """After warm-up the state carries l_pred inside its band and the seed scores."""
        det = ForecastDetector()
        s = [det.update(t, v) for t, v in curve(3000)][-1]
        assert s.band_lo < s.l_pred < s.band_hi
        assert 0 < s.Q <= 1 and s.T == det.threshold and s.W <= 0

    def test_refits_are_amortized(self):
        """Refits follow a geometric schedule: few of them over a long run."""
        det = ForecastDetector()
        for t, v in curve(50000):
            det.update(t, v)
        assert det._fits < 60

    @pytest.mark.parametrize("kind", ["wsd", "cosine", "restart", "constant"])
    def test_schedule_aware_with_lr(self, kind):
        """With lr passed, warm-downs, cosine, warm restarts and constant LR stay silent,
        and a drift on top of the schedule is still caught."""
        assert first_page_lr(kind) is None
        hit = first_page_lr(kind, drift_at=8000)
        assert hit is not None and 8000 < hit[0] < 9500

    def test_nonfinite_and_bad_loss_do_not_poison(self):
        """A NaN in the stream is skipped: the next finite losses are scored as before."""
        det = ForecastDetector()
        states = [det.update(t, float("nan") if t == 2000 else v) for t, v in curve(3000)]
        assert states[1999].l_pred is None and states[2100].l_pred is not None
        assert not any(s.alert for s in states)

    def test_observe_leaves_the_state_as_attributes(self):
        """observe() (what RunMonitor calls) leaves each ForecastState field as an attribute
        with the state's own value: None before the first fit and on a NaN loss."""
        a, b = ForecastDetector(), ForecastDetector()
        for t, v in curve(2500):
            v = float("nan") if t in (100, 2000) else v
            want = a.update(t, v)
            b.observe(t, v)
            assert repr(tuple(getattr(b, f) for f in ForecastState._fields)) == repr(tuple(want))
        assert want.l_pred is not None and b.band_lo < b.l_pred < b.band_hi

    @pytest.mark.parametrize("kw", [{"warmup": 0}, {"holdout": 1.5}, {"bin_ratio": 1.0},
                                    {"threshold": -1.0}, {"law": "cubic"}, {"refit_ratio": 1}])
    def test_bad_arguments_named(self, kw):
        """A bad constructor argument raises ConfigError naming it."""
        with pytest.raises(ConfigError, match=next(iter(kw))):
            ForecastDetector(**kw)


def first_page_lr(kind, n=12000, drift_at=None, seed=5):
    """A loss that follows Tissue et al.'s law under ``kind`` (`lr_curves`), fed with its lr."""
    eta = lr_curves.etas(kind, n)
    mon, rng = RunMonitor(), random.Random(seed)
    for t, (lr, clean) in enumerate(zip(eta.tolist(), lr_curves.tissue_loss(eta).tolist()), 1):
        loss = clean + rng.gauss(0, 0.03)
        if drift_at is not None and t > drift_at:
            loss += 1e-4 * (t - drift_at)
        for f in mon.update_loss(t, loss, lr).findings:
            if f.active and f.severity != "info":
                return t, f.kind
    return None


class TestCompanions:
    def test_spike_benign_is_info_sustained_is_warning(self):
        """A one-step outlier is info; a jump that stays up is a warning."""
        det, sev = SpikeDetector(), {"info": [], "warning": []}
        rng = random.Random(1)
        for t in range(1, 1001):
            v = 3.0 + rng.gauss(0, 0.05) + (1.5 if t == 300 else 0) + (1.0 if t >= 700 else 0)
            s = det.update(t, v)
            if s.severity:
                sev[s.severity].append(t)
        assert 301 in sev["info"] and 700 < sev["warning"][0] <= 712

    def test_plateau_no_learning_from_eval_points(self):
        """A run stuck near loss 8, seen only every 586 steps, is a plateau."""
        det = PlateauDetector()
        hit = next(s for s in range(586, 14000, 586) if det.update(s, 8.0 + 0.01 * ((s // 586) % 3)).active)
        assert hit <= 4102

    def test_plateau_silent_when_learning(self):
        det = PlateauDetector()
        assert not any(det.update(s, 4.0 * (s / 586) ** -0.3).active for s in range(586, 14000, 586))

    def test_plateau_slowdown_catches_a_stagnating_power_law(self):
        """A power law whose decline stops at step 3000 (noise kept; it had 0.21 left to fall,
        2.8% of its progress) is a plateau; the same curve without the stop raises nothing.
        (Stopped at 6000 it withholds 0.11 by the end, 1.4% of its progress: below the
        `effect` gate, an info finding.)"""
        def run(stop):
            rng, mon = random.Random(7), RunMonitor("pretraining")
            law = lambda t: 2.8 + 8.0 * t ** -0.35
            stream = ((t, law(min(t, stop)) + rng.gauss(0, 0.05)) for t in range(1, 16001))
            return first_page(mon, stream)
        assert run(10 ** 9) == (None, None)
        hit, kind = run(3000)
        assert kind == "plateau" and 3000 < hit < 10000

    def test_plateau_slowdown_silent_on_wsd_warmdown_and_outliers(self):
        """A WSD schedule's warm-down (the loss falls faster from 7000 to 9000, then holds
        flat at lr 0) and benign one-batch outliers raise no warning."""
        rng, mon = random.Random(11), RunMonitor("pretraining")
        def loss(t):
            warm = min(1.0, (t - 7000) / 2000) if t > 7000 else 0.0
            out = 1.5 if t in (946, 3194, 5335) else 0.0
            return (2.9 + 8.0 * min(t, 9000) ** -0.35 - 0.25 * (1 - (1 - warm) ** 2)
                    + rng.gauss(0, 0.08) + out)
        assert first_page(mon, ((t, loss(t)) for t in range(1, 12001))) == (None, None)

    def test_plateau_slowdown_needs_a_decelerating_regime(self):
        """A BERT-style curve (flat, a fast drop, then slow) is not a slowdown: the drop is
        an acceleration, which disarms the rule for the following intervals."""
        rng, det = random.Random(5), PlateauDetector()
        curve_ = lambda t: 4.0 - 2.0 / (1 + math.exp(-(t - 2500) / 300)) - 1e-5 * t
        states = [det.update(t, curve_(t) + rng.gauss(0, 0.1)) for t in range(1, 12001)]
        assert not any(s.active for s in states)
        assert max(s.slow_z for s in states) < det.slow_z

    def test_plateau_slowdown_off_and_arguments_named(self):
        rng, det = random.Random(3), PlateauDetector(slowdown=False)
        law = lambda t: 3.0 + 6.0 * t ** -0.3
        assert not any(det.update(t, law(min(t, 8000)) + rng.gauss(0, 0.05)).active
                       for t in range(1, 30001))
        for kw in ({"slow_keep": 1.5}, {"slow_ratio": 1.0}, {"slowdown": 1}, {"slow_span": 0}):
            with pytest.raises(ConfigError, match=next(iter(kw))):
                PlateauDetector(**kw)

    def test_divergence_critical(self):
        """Explosive growth becomes a critical divergence."""
        mon = RunMonitor()
        stream = ((t, v * (1.004 ** max(0, t - 5000))) for t, v in curve(8000))
        t, kind = first_page(mon, stream)
        assert kind in ("divergence", "drift", "spike") and 5000 < t < 5600

    def test_overfit_from_eval(self):
        """Validation loss rising while training loss falls is overfit."""
        mon = RunMonitor()
        kinds = set()
        for t, v in curve(8000):
            mon.update_loss(t, v)
            if t % 250 == 0:
                val = 3.2 + max(0.0, t - 4000) * 1e-4
                st = mon.update_eval(t, {"val_loss": val})
                kinds |= {f.kind for f in st.findings if f.active}
        assert "overfit" in kinds

    def test_resume_jump(self):
        """Steps going back are a resume_jump finding, a big loss jump with it a warning."""
        mon = RunMonitor()
        for t, v in curve(3000):
            mon.update_loss(t, v)
        st = mon.update_loss(2000, 6.0)
        f = next(f for f in st.findings if f.kind == "resume_jump")
        assert f.active and f.severity == "warning"

    def test_nonfinite_immediate(self):
        """The first NaN is a critical finding at that very step."""
        mon = RunMonitor()
        for t, v in curve(100):
            mon.update_loss(t, v)
        st = mon.update_loss(101, float("nan"))
        assert st.alert and st.findings[0].kind == "nonfinite" and st.findings[0].step == 101


class TestGaps:
    """One point after a gap in a dense stream (a pause, a resume's rewind) must not
    replace a level or a noise scale on its own; a sparse log keeps its weights."""

    def test_gap_counts_as_at_most_four_usual_gaps(self):
        from wtwin.detect.base import GAP, decay, gap_decay
        assert gap_decay(1000, 1.0, 100) == decay(GAP, 100)
        assert gap_decay(500, 500.0, 100) == decay(500, 100)   # a sparse log: unchanged
        assert gap_decay(1, 1.0, 100) == decay(1, 100)

    def test_rise_level_after_a_gap(self):
        det = REGISTRY["rise"]()
        for t, v in curve(5000):
            det.update(t, v)
        before = det._level
        det.update(6000, before + 0.1)            # 2 sd above, after a 1000-step gap
        assert 0 < det._level - before < 0.004    # the weight of 4 steps, not of 1000

    def test_spike_scale_after_a_gap(self):
        det = SpikeDetector()
        for t, v in curve(5000):
            det.update(t, v)
        scale = det._scale
        det.update(6000, det._level)              # a change of 0: the scale must not collapse
        assert det._scale > 0.9 * scale

    def test_forecast_noise_after_a_gap(self):
        """The forecast's residual noise survives a 10,000-step gap (it fell 400x on one
        residual before: a band too narrow, and every later residual many noise units)."""
        rng = random.Random(5)
        det = ForecastDetector()
        for t in list(range(1, 60001)) + [70000]:
            det.update(t, 2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05))
            if t == 60000:
                before = det._noise
        assert det._noise > 0.9 * before

    def test_plateau_no_slope_across_a_gap(self):
        det = PlateauDetector()
        for t, v in curve(6000):
            det.update(t, v)
        det.update(9000, 2.6 + 9.0 * 9000 ** -0.35)
        lo, hi = det._hole
        assert lo == pytest.approx(math.log(6001)) and hi == pytest.approx(math.log(9001 * 1.3))
        for t, v in curve(20000, start=9001):
            assert not det.update(t, v).active
        assert not any(lo < u < hi for u, _, _ in det._slopes)


class TestMonitor:
    @pytest.mark.parametrize("law", ["power", "schedule", "mpl", "auto"])
    def test_a_negative_lr_is_read_as_unknown(self, law):
        """A negative lr (no schedule has one; the laws take its log) is read as no lr: it
        used to raise at the forecast's next refit, and on every update after it."""
        a, b = RunMonitor(law=law), RunMonitor(law=law)
        for t in range(1, 4000):
            lr = 1e-3 * (1 - t / 8000)
            loss = 3 + 5 * t ** -0.3
            bad = -lr if t >= 2000 else lr
            assert a.update_loss(t, loss, bad) == b.update_loss(t, loss, lr if t < 2000 else None)

    def test_snapshot_half_restore_identical(self):
        """Half a run, snapshot through msgpack, restore in a new monitor: same states."""
        data = list(curve(9000, drift_at=6000))
        a = RunMonitor("pretraining")
        for t, v in data[:4500]:
            a.update_loss(t, v)
        snap = msgpack.unpackb(msgpack.packb(a.snapshot()), strict_map_key=False)
        b = RunMonitor("finetuning")
        b.restore(snap)
        for t, v in data[4500:]:
            assert a.update_loss(t, v) == b.update_loss(t, v)

    def test_presets_construct_and_unknown_rejected(self):
        for p in ("pretraining", "adaptive_pretraining", "finetuning", "custom"):
            RunMonitor(p)
        with pytest.raises(ValueError):
            RunMonitor("nope")
        with pytest.raises(ConfigError, match="threshold"):
            RunMonitor("custom", forecast={"threshold": 0})

    def test_findings_only_on_change(self):
        """A clean run emits no findings at all (beyond benign info)."""
        mon = RunMonitor()
        out = [f for t, v in curve(6000) for f in mon.update_loss(t, v).findings]
        assert all(f.severity == "info" for f in out)

    def test_seed_compatible_wtwin_monitor(self):
        """WTwinMonitor(preset).update(step, loss) has the seed's fields and catches a drift."""
        from wtwin.detect import WTwinMonitor as W
        assert W is WTwinMonitor
        mon = WTwinMonitor(preset="pretraining")
        caught = None
        for t, v in curve(9000, drift_at=6000):
            s = mon.update(t, v)
            for name in ("step", "l_obs", "l_pred", "D", "Q", "T", "W", "alert"):
                assert hasattr(s, name)
            if s.alert and caught is None:
                caught = t
        assert 6000 < caught < 6800

    def test_finetuning_preset_exponential_floor(self):
        """The finetuning preset: an exponential-to-floor curve is silent, a drift on it is caught."""
        def run(drift):
            rng, mon = random.Random(1), RunMonitor("finetuning")
            stream = ((t, 0.8 + 1.5 * math.exp(-t / 300) + rng.gauss(0, 0.02)
                       + (2e-4 * (t - 2000) if drift and t > 2000 else 0.0)) for t in range(1, 3001))
            return first_page(mon, stream)[0]
        assert run(False) is None
        assert 2000 < run(True) < 2400

    def test_registry_names(self):
        assert set(REGISTRY) == {"forecast", "finetuning", "spike", "nonfinite", "divergence",
                                 "plateau", "overfit", "resume_jump", "rise", "effect", "gradnorm",
                                 "frozen_loader", "chance", "early_rise", "throughput", "memory"}


class TestWhatPages:
    """The `effect` gate and the rules that page on their own (issue 14's cases)."""

    def test_a_frozen_loss_pages_a_plateau(self):
        """One exact value repeated 20 times (a NaN the logger hides) is a plateau; 19 are not."""
        def run(n_frozen):
            rng, mon = random.Random(4), RunMonitor("pretraining")
            stream = [(t, 1.0 + 5 * t ** -0.5 + rng.gauss(0, 0.02)) for t in range(50, 2050, 50)]
            stream += [(2050 + 50 * i, 0.7799) for i in range(n_frozen)]
            return first_page(mon, iter(stream))
        assert run(19) == (None, None)
        hit, kind = run(20)
        assert kind == "plateau" and hit == 2050 + 50 * 19

    def test_a_tiny_rise_on_a_loss_near_zero_does_not_page(self):
        """A fine-tune whose loss fell from 1 to 1e-4 and then wobbles to 2e-4 is no
        divergence (it paged critical at 0.000197 against a best of 0.000118)."""
        rng, mon = random.Random(2), RunMonitor("finetuning")
        def loss(t):
            base = 1e-4 + math.exp(-t / 150)
            return base * (1 + 0.3 * rng.random()) + (1e-4 if 2000 < t < 2600 else 0.0)
        assert first_page(mon, ((t, loss(t)) for t in range(1, 3001))) == (None, None)

    def test_scaled_and_offset_logs_page_alike(self):
        """The same drifting run times 0.01, times 100 and plus 1000 pages the same kind at
        about the same step (within 10% of the delay: the law fit's stopping rule compares
        parameters of mixed units, so a rescaled fit stops a few iterations apart)."""
        def run(f):
            rng, mon = random.Random(6), RunMonitor("pretraining")
            stream = ((t, f(2.6 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05)
                            + (3e-4 * (t - 6000) if t > 6000 else 0.0))) for t in range(1, 9001))
            return first_page(mon, stream)
        first = run(lambda v: v)
        assert first[0] is not None and first[0] > 6000
        for f in (lambda v: v * 0.01, lambda v: v * 100, lambda v: v + 1000):
            hit, kind = run(f)
            assert kind == first[1] and abs(hit - first[0]) <= 0.1 * (first[0] - 6000)

    def test_a_critical_divergence_stays_firing_while_the_loss_stays_up(self):
        """LR x100: the loss goes from 0.03 to ~2.7 and stays there, noisy; the divergence
        does not resolve while it does (it resolved at step 1193 before)."""
        rng, mon = random.Random(8), RunMonitor("pretraining")
        active = []
        for t in range(1, 2001):
            loss = 0.03 + 2.3 * math.exp(-t / 100) + rng.gauss(0, 0.005)
            if t > 800:
                loss = 2.7 + rng.gauss(0, 0.4)
            st = mon.update_loss(t, loss)
            active += [(t, f.active) for f in st.findings if f.kind == "divergence"]
        assert active and active[0][1] and 800 < active[0][0] < 900
        assert all(a for _, a in active)
