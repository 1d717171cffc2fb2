"""Rounded logs (issue 36): a loss printed at 4 or 5 decimals repeats itself and its
scatter stops shrinking at the last printed digit. That is the print, not a frozen logger
or a frozen data loader: a healthy rounded or noiseless log passes ``--fail-on critical``,
and the failures those rules exist for still page when the log is rounded."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from wtwin.detect.frozen_loader import FrozenLoaderDetector
from wtwin.detect.monitor import RunMonitor
from wtwin.detect.resolution import NONE, RAW, decimals, quantum


def _csv(path, losses, fmt):
    path.write_text("step,loss\n" + "".join(f"{s},{x:{fmt}}\n" for s, x in enumerate(losses, 1)))
    return path


def _gate(path, *args):
    return subprocess.run([sys.executable, "-m", "wtwin.offline.cli", "monitor", str(path), *args,
                           "--fail-on", "critical"], capture_output=True, text=True, timeout=120)


def _kinds(losses, preset="pretraining"):
    """Every (kind, severity) that fired, replaying ``losses`` at steps 1, 2, ..."""
    mon, fired = RunMonitor(preset), set()
    for s, x in enumerate(losses, 1):
        for f in mon.update_loss(s, x).findings:
            if f.active:
                fired.add((f.kind, f.severity))
    return fired


def noiseless(n=3000, places=5):
    """The issue's noiseless power law, printed at ``places`` decimals."""
    return [round(2 + 8 * (s + 10) ** -0.4, places) for s in range(1, n + 1)]


def memorizing(n=2000, places=4, seed=0):
    """A fine-tune that memorizes: 10% scatter, falling toward 0, printed at 4 decimals
    (Hugging Face's Trainer rounds so): it ends at 0.0002, 0.0001 and 0.0, repeated."""
    rng = random.Random(seed)
    return [round(abs(2.0 * 2.718281828 ** (-s / 150) * (1 + 0.1 * rng.gauss(0, 1))), places)
            for s in range(1, n + 1)]


class TestDecimals:
    def test_a_stream_needs_the_most_decimals_any_of_its_values_needs(self):
        d = NONE
        for x in (3.0, 2.5, 0.0, 2.41, 2.4187, 2.42):
            d = decimals(d, x)
        assert (d, quantum(d)) == (4, 1e-4)

    def test_a_raw_float_is_not_rounded_and_stays_so(self):
        d = decimals(decimals(NONE, 0.5), 0.1234567891234)
        assert d == RAW and quantum(d) == 0.0
        assert decimals(d, 0.5) == RAW

    def test_zeros_and_non_finite_values_say_nothing(self):
        d = NONE
        for x in (0.0, float("nan"), float("inf")):
            d = decimals(d, x)
        assert d == NONE and quantum(d) == 0.0


    def test_the_compiled_test_of_a_print_agrees_with_round(self):
        """``decimals`` asks whether ``x`` is a print of ``k`` decimals once per point;
        compiled it does so without ``round`` (`resolution._fits`). On prints of 0-9
        decimals at every magnitude a loss takes, raw floats, ties (0.125) and values
        past 2**53 once scaled, it answers as ``round(x, k) == x`` does."""
        def reference(d, x):
            if d >= RAW or x == 0.0 or x != x or x in (float("inf"), float("-inf")):
                return d
            k = max(d, 0)
            while k < RAW and round(x, k) != x:
                k += 1
            return k

        rng = random.Random(7)
        values = [0.125, 0.375, 2.5, 1e-9, 123456.7890123, 9.0e15 / 1e3, 2.0 ** 60, -0.0625,
                  5e-324, 1.7976931348623157e308]
        for _ in range(20000):
            mag = 10.0 ** rng.uniform(-6, 6) * rng.choice((1, -1))
            values += [round(mag, rng.randrange(10)), mag, float(f"{mag:.{rng.randrange(12)}e}")]
        for x in values:
            for d in (NONE, 0, 2, 4, 6, 9):
                assert decimals(d, x) == reference(d, x), (d, x)

class TestHealthyRoundedLogs:
    @pytest.mark.parametrize("places", [4, 5])
    def test_a_noiseless_power_law_passes_the_gate(self, tmp_path, places):
        """It paged `frozen_loader` critical 7 times at 5 decimals: the rounding's scatter
        stood in for noise, and the real curvature under it shrank."""
        r = _gate(_csv(tmp_path / "law.csv", noiseless(places=places), f".{places}f"))
        assert r.returncode == 0, r.stdout + r.stderr

    @pytest.mark.parametrize("preset", ["pretraining", "finetuning"])
    def test_a_fine_tune_that_memorizes_passes_the_gate_and_is_not_frozen(self, tmp_path, preset):
        losses = memorizing()
        assert losses[-40:].count(0.0) + losses[-40:].count(0.0001) > 20   # it sits at the floor
        r = _gate(_csv(tmp_path / "ft.csv", losses, ".4f"), "--preset", preset)
        assert r.returncode == 0, r.stdout + r.stderr
        fired = _kinds(losses, preset)
        assert not any(k == "frozen_loader" for k, _ in fired), fired
        assert "loss frozen" not in r.stdout

    def test_a_loss_printed_at_exactly_zero_from_the_start_is_not_frozen(self):
        assert not any(k == "plateau" for k, _ in _kinds([0.0] * 200))


class TestFailuresInRoundedLogs:
    def test_a_loss_that_drops_to_a_flat_zero_is_still_frozen(self):
        """An fp16 run whose trainer turns NaN into 0.0: the loss was far from 0 a moment
        before."""
        rng = random.Random(1)
        losses = [round(2.3 + 0.3 * 2.718281828 ** (-s / 200) + rng.gauss(0, 0.02), 4)
                  for s in range(1, 601)] + [0.0] * 60
        assert ("plateau", "warning") in _kinds(losses)

    def test_a_value_repeated_far_above_the_floor_is_still_frozen(self):
        rng = random.Random(2)
        losses = [round(2.3 + 0.3 * 2.718281828 ** (-s / 200) + rng.gauss(0, 0.02), 4)
                  for s in range(1, 601)] + [2.3187] * 40
        assert ("plateau", "warning") in _kinds(losses)

    @pytest.mark.parametrize("places", [None, 4])
    def test_a_frozen_loader_pages_whether_or_not_the_log_is_rounded(self, places):
        """The detector's own case (its doctest: a scatter of 0.05, 500 printed digits at 4
        decimals, that vanishes) at full precision and at 4 decimals. At 4 decimals a loss
        must scatter by over a hundred digits for its collapse to show: our own MLP and
        CNN on load_digits (loss 0.01-0.03) print too few (docs/DETECTION.md)."""
        rng, det, first = random.Random(0), FrozenLoaderDetector(), None
        for t in range(1, 601):
            fresh = rng.gauss(0, 0.05) if t <= 400 else -0.2 * (1 - 0.99 ** (t - 400))
            x = 0.3 + t ** -0.5 + fresh
            if det.update(t, x if places is None else round(x, places)).active and first is None:
                first = t
        assert first is not None and 400 < first < 450


class TestDeadNetwork:
    """A log that is not rounded: a dead network's loss, averaged from float32 values,
    moves in its ninth digit only (a PINN sat at 0.51090220(5-6) after a blow-up); a value
    repeated to single precision 20 times is frozen, and a converged healthy loss whose
    changes are a millionth of it is not."""

    @staticmethod
    def _run(after, seed=4):
        rng = random.Random(seed)
        return [2.9 * (1 + s / 20) ** -0.5 + abs(rng.gauss(0, 0.3)) for s in range(1, 301)] + after(rng)

    def test_a_loss_stuck_in_its_ninth_digit_is_frozen(self):
        losses = self._run(lambda rng: [0.5109022 + rng.uniform(-5e-9, 5e-9) for _ in range(40)])
        assert ("plateau", "warning") in _kinds(losses)
        mon = RunMonitor("pretraining")
        msgs = [f.message for s, x in enumerate(losses, 1) for f in mon.update_loss(s, x).findings
                if f.kind == "plateau" and f.active]
        assert msgs and "(to single precision) for 20 points" in msgs[0], msgs

    def test_a_converged_loss_moving_a_millionth_is_not_frozen(self):
        losses = self._run(lambda rng: [0.5109022 * (1 + rng.uniform(-2e-6, 2e-6)) for _ in range(200)])
        assert not any(k == "plateau" for k, _ in _kinds(losses))

    def test_the_shared_pinn_that_froze_after_its_blow_up_pages(self):
        from corpus import SHARED, require_data
        from wtwin.offline.logs import read_log

        require_data()
        log = read_log(str(SHARED / "real-logs-3" / "lightning_pinn_pendulum_v5_blowup_frozen.csv"))
        mon, first = RunMonitor("pretraining"), None
        for kind, step, value, *_ in log.events():
            if kind == "loss" and value is not None:
                for f in mon.update_loss(step, value).findings:
                    if f.kind == "plateau" and f.active and first is None:
                        first = step
        assert first is not None and 349 < first <= 1500, first
