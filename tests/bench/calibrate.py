"""The written procedure that chooses every threshold the harness chooses.

A threshold is set from *other* sources' clean runs only, never from the run it is
judged on, and it must hold on a source the procedure never saw, with room to spare:

1. for each clean (or "unknown") log, the statistic the threshold is compared with: its
   largest value over the run (for our gates: the largest effect score seen while a
   detector was active, `RunMonitor.peak_scores`; for ``stall_gate``: the largest ratio
   of the decline a slowdown's earlier pace promised to the one the level made, while
   that promise was material; for a baseline: its statistic after its own warm-up);
2. per group (source): the largest value over the group's logs, so that a large group
   counts once;
3. the threshold is ``MARGIN`` x the *largest* of those group values, and never below
   the product's floor (``FLOORS``): the smallest effect that can page, a stated choice
   ("a change you would act on"), not a by-product of the data.

Nested leave-one-source-out: for each held-out source the whole procedure reruns
without it (`choose` with ``exclude``), and the margin that counts is the held-out
source's own largest clean score against the gate it got (`margins`). The goal, held by
tests/test_shipped_gates.py: at least ``MARGIN`` for every held-out source. A margin
of 1.6x on the corpus became clean pages on unseen runs (healthy shapes of other
sources score up to 2x what the corpus did), which is why the rule takes the largest
value, not a quantile, and why the floors sit where they do:

- ``gate`` 4: a level's deviation pages from 4 units of ``max(rho x progress, wobble)``,
  that is from 1% of the run's progress (``rho`` = 0.25%) and 4 times its own wobble;
- ``jump_gate`` 4: the same for one point's jump (a sustained spike, a resume's jump);
- ``stall_gate`` 6: a slowdown pages when the level fell less than a sixth of what its
  own earlier pace promised (and its shortfall passes ``gate``).

Slowdowns are scored apart (``peak_scores["slowdown"]``): one pages only past both
``gate`` and ``stall_gate``, and ``stall_gate`` keeps the margin for them.

    .venv/bin/python tests/bench/calibrate.py      # the shipped defaults and every margin
"""

from __future__ import annotations

import math

MARGIN = 2.0
GATES = {"gate": ("drift", "plateau", "divergence"), "jump_gate": ("spike", "resume_jump"),
         "stall_gate": ("stall",)}
FLOORS = {"gate": 4.0, "jump_gate": 4.0, "stall_gate": 6.0}


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
    """The threshold for ``exclude`` held out (None: from every group): ``MARGIN`` x the
    largest clean value of the other groups, at least ``floor``."""
    vals = [v for g, v in groups.items() if g != exclude and math.isfinite(v)]
    return max([floor] + [MARGIN * v for v in vals])


def margins(groups: dict[str, float], floor: float) -> dict[str, tuple[float, float]]:
    """Per held-out group: (its largest clean value, the threshold the procedure gave it
    without it). A group whose value is 0 never had a detector active: no margin to keep."""
    return {g: (v, choose(groups, g, floor)) for g, v in groups.items()}


def smallest_margin(groups: dict[str, float], floor: float) -> tuple[str | None, float]:
    """The held-out group with the least room, and its gate / largest clean value."""
    worst: tuple[str | None, float] = (None, math.inf)
    for g, (v, thr) in margins(groups, floor).items():
        if v > 0 and thr / v < worst[1]:
            worst = (g, thr / v)
    return worst


def main() -> int:
    import sys
    sys.path.insert(0, __file__.rsplit("/", 2)[0])
    from detection import calibration_pass
    stats = calibration_pass()
    for g in GATES:
        groups = by_group([(r["group"], r["stats"][g]) for r in stats])
        floor = FLOORS[g]
        worst, m = smallest_margin(groups, floor)
        top = sorted(groups.items(), key=lambda kv: -kv[1])[:3]
        print(f"{g}: {choose(groups, floor=floor):.3g} (floor {floor:g}, from {len(groups)} groups); "
              f"largest clean values: " + ", ".join(f"{k} {v:.3g}" for k, v in top)
              + f"; smallest held-out margin {m:.2f}x ({worst})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
