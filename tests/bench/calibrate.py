"""The written procedure that chooses every threshold the harness chooses.

A threshold is set from *other* sources' clean runs only, never from the run it is
judged on:

1. for each clean (or "unknown") log, the statistic the threshold is compared with: its
   largest value over the run (for our gates: the largest effect score seen while a
   detector was active, `RunMonitor.peak_scores`; for a baseline: its statistic after
   its own warm-up; for ``stall_gate``: the largest ratio of the decline a slowdown's
   earlier pace promised to the one the level made, while that promise was material);
2. per group (source): the largest value over the group's logs, so that a large group
   counts once;
3. the threshold is ``SAFETY`` x the ``QUANTILE`` of those group values (numpy's
   "higher" method: an observed value), and never below ``FLOOR`` for our gates
   (``FLOORS`` where a gate has its own).

Leave-one-source-out: the held-out group's threshold comes from the other groups; the
shipped defaults (detect/presets.py) come from all groups. The false-alarm target this
states: at most 1 source in 10 (QUANTILE 0.9) would reach the bare quantile, and SAFETY
leaves room for the next source's wobble being 1.5x larger than that.

    .venv/bin/python tests/bench/calibrate.py      # the shipped defaults, from all groups
"""

from __future__ import annotations

import math

import numpy as np

QUANTILE = 0.9
SAFETY = 1.5
FLOOR = 3.0       # our gates: never below 3 units of max(rho x progress, wobble)
GATES = {"gate": ("drift", "plateau", "divergence"), "jump_gate": ("spike", "resume_jump"),
         "stall_gate": ("stall",)}
# stall_gate is a ratio (the decline a slowdown's earlier pace promised over the one seen,
# while the promise is material): never below 4, "a quarter of what it should have fallen"
FLOORS = {"stall_gate": 4.0}


def log_stats(peaks: dict[str, float]) -> dict[str, float]:
    """A log's statistic per gate from its `RunMonitor.peak_scores` (0 when no detector
    was ever active: nothing to gate)."""
    return {g: max([peaks[k] for k in kinds if k in peaks and math.isfinite(peaks[k])], default=0.0)
            for g, kinds in GATES.items()}


def by_group(per_log: list[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for group, v in per_log:
        out[group] = max(out.get(group, -math.inf), v)
    return out


def choose(groups: dict[str, float], exclude: str | None = None, floor: float = 0.0) -> float:
    """The threshold for ``exclude`` held out (None: from every group)."""
    vals = [v for g, v in groups.items() if g != exclude and math.isfinite(v)]
    if not vals:
        return floor
    q = float(np.quantile(vals, QUANTILE, method="higher"))
    return max(floor, SAFETY * q)


def main() -> int:
    import sys
    sys.path.insert(0, __file__.rsplit("/", 2)[0])
    from detection import calibration_pass
    stats = calibration_pass()
    for g in GATES:
        groups = by_group([(r["group"], r["stats"][g]) for r in stats])
        print(f"{g}: {choose(groups, floor=FLOORS.get(g, FLOOR)):.3g} (from {len(groups)} groups; "
              f"largest group values: {sorted(groups.values())[-4:]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
