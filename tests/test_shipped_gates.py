"""The gates the product ships are the ones the written procedure chooses, and they hold
with room to spare on every source the procedure did not see.

`tests/bench/calibrate.py` chooses `gate`, `jump_gate` and `stall_gate`: ``MARGIN`` (2) x
the largest clean score of the sources it sees, never below the product's floor (the
smallest effect that can page). Nested leave-one-source-out: for each source held out,
the whole procedure reruns without it, and that source's own largest clean score must
sit at least ``MARGIN`` under the gate it got. `wtwin monitor` and wtwind run
`EffectDetector`'s defaults, so those defaults must be the procedure's choice, or the
figures in docs/DETECTION.md describe another detector than the one users run.
"""

import pathlib
import sys

import pytest

from corpus import require_data

from wtwin.detect.effect import EffectDetector
from wtwin.detect.presets import PRESET_PARAMS

sys.path.insert(0, str(pathlib.Path(__file__).parent / "bench"))

import calibrate  # noqa: E402

GATES = tuple(calibrate.GATES)


def _defaults() -> dict:
    d = EffectDetector()
    return {g: getattr(d, g) for g in GATES}


@pytest.fixture(scope="module")
def stats():
    require_data()
    import detection
    return detection.calibration_pass(workers=2)


def test_no_preset_overrides_the_gates():
    """The presets leave the gates to the procedure (one value for every kind of run)."""
    for preset, params in PRESET_PARAMS.items():
        assert not set(params.get("effect", {})) & set(GATES), preset


def test_shipped_gates_are_the_procedures_choice(stats):
    import detection
    chosen = detection.thresholds(stats, None)
    assert {g: chosen[g] for g in GATES} == pytest.approx(_defaults())


@pytest.mark.parametrize("gate", GATES)
def test_every_held_out_source_keeps_the_margin(stats, gate):
    """Nested: each source's largest clean score against the gate chosen without it."""
    groups = calibrate.by_group([(r["group"], r["stats"][gate]) for r in stats])
    short = {g: (round(v, 3), round(thr, 3)) for g, (v, thr)
             in calibrate.margins(groups, calibrate.FLOORS[gate]).items()
             if v * calibrate.MARGIN > thr}
    assert short == {}, f"{gate}: held-out sources under {calibrate.MARGIN}x: {short}"


def test_the_procedure_takes_the_largest_source_not_a_quantile():
    """One source whose clean runs score high sets the gate for everyone (a quantile
    would let one source in ten through: the next unseen source is that one)."""
    groups = {f"s{i}": 1.0 for i in range(20)} | {"loud": 3.0}
    assert calibrate.choose(groups, floor=4.0) == 6.0
    assert calibrate.choose(groups, exclude="loud", floor=4.0) == 4.0
    assert calibrate.smallest_margin(groups, 4.0) == ("loud", pytest.approx(4.0 / 3.0))
