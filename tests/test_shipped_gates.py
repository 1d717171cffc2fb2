"""The gates the product ships are the ones the written procedure chooses.

`tests/bench/calibrate.py` chooses `gate`, `jump_gate` and `stall_gate` from the clean
real logs (every source in); `tests/bench/detection.py` scores each source with the
gates chosen without it. `wtwin monitor` and wtwind run `EffectDetector`'s defaults, so
those defaults must be what the procedure chose, or the figures in docs/DETECTION.md
describe another detector than the one users run (they did until 2026-12-05: 4 shipped,
3 chosen, and at 4 the short logs' catch rate fell from 89.5% to 82.4%).
"""

import pathlib
import sys

import pytest

from corpus import require_data

from wtwin.detect.effect import EffectDetector
from wtwin.detect.presets import PRESET_PARAMS

sys.path.insert(0, str(pathlib.Path(__file__).parent / "bench"))

GATES = ("gate", "jump_gate", "stall_gate")


def _defaults() -> dict:
    d = EffectDetector()
    return {g: getattr(d, g) for g in GATES}


def test_no_preset_overrides_the_gates():
    """The presets leave the gates to the procedure (one value for every kind of run)."""
    for preset, params in PRESET_PARAMS.items():
        assert not set(params.get("effect", {})) & set(GATES), preset


def test_shipped_gates_are_the_procedures_choice():
    require_data()
    import detection

    stats = detection.calibration_pass(workers=2)
    chosen = detection.thresholds(stats, None)
    assert {g: chosen[g] for g in GATES} == pytest.approx(_defaults())
