"""The first page of every injected case of the detection harness, with its message.

The same cases as ``tests/bench/detection.py`` (seeds 2, salt 0, thresholds held out
by source), each replayed until its first warning or critical finding; writes a JSON
list of ``{"kind", "ours", "page": [kind, severity, message] or null}``::

    python tests/bench/first_pages.py pages.json

docs/results/2026-12-05-detection.md ("Results, branch names") tabulates the ramps' plateau messages from it.
"""

from __future__ import annotations

import json
import os
import sys

sys.path[:0] = [os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))]

import detection  # noqa: E402  (tests/bench/detection.py)

_MESSAGES: list = []      # the first page of each case replayed, in order (None: no page)


def _first_page(mon, steps, x, lrs, start):
    """``detection.first_page``, which also records the page's message."""
    for i in range(start, len(x)):
        state = mon.update_loss(int(steps[i]), float(x[i]), detection._lr(lrs[i]))
        for f in state.findings:
            if f.active and f.severity in detection.PAGE:
                _MESSAGES.append((f.kind, f.severity, f.message))
                return int(steps[i]), f.kind
    _MESSAGES.append(None)
    return None, None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    detection.first_page = _first_page
    entries = detection.entries()
    stats = detection.calibration_pass(1)
    thr = {g: detection.thresholds(stats, g) for g in sorted({e.group for e in entries})}
    out = []
    for e in entries:
        if e.label != "clean" or detection.load(e).n_loss < 300:
            continue
        del _MESSAGES[:]
        recs = detection._inject_log((e, thr[e.group], 2, 0))
        assert len(_MESSAGES) == len(recs), (e, len(_MESSAGES), len(recs))
        out.extend({"kind": r["kind"], "ours": r["ours"], "page": m} for r, m in zip(recs, _MESSAGES))
    with open(argv[0], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
