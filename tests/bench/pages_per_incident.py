"""Pages per incident: how many pages one injected failure sends, as a user receives them.

    .venv/bin/python tests/bench/pages_per_incident.py [--seeds 1] [--workers 2] [--json out.json]

The detection harness (`detection.py`) scores a failure by its first page. This replays
the same injected failures (`detection.injection_cases`: the progressive kinds, shifts
and stagnations, seed 0 by default, into the clean logs of >= 300 points) through
`wtwin.detect.replay.alerts`, the path from events to the alerts a sink sends
(`AlertPolicy`: deduplicated, a resolve held for 100 quiet steps), with the shipped
defaults (no threshold is chosen here; the held-out gates of `detection.py` are the
shipped ones for every group), and counts the warning/critical firings from the onset on. One incident
should be one page, or one page and its escalations (a warning that becomes critical, a
drift that runs away as a `divergence`). Reported: the firings per caught incident, the
distinct kinds per incident, the re-firings (a kind firing again at a severity it
already fired at: a page that flapped), and the pairs of kinds that share an incident.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import pathlib
import sys
import time

import numpy as np

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent)]

import detection as D  # noqa: E402

from wtwin.detect.replay import alerts  # noqa: E402

KINDS = D.PROGRESSIVE + ("shift", "stagnation")
RANK = {"warning": 1, "critical": 2}


def _log(args) -> list[tuple]:
    e, seeds = args
    steps, x, lrs = D.loss_points(D.load(e))
    out = []
    if len(x) < 300:            # as the harness: failures go into logs of >= 300 points
        return out
    places = D.print_places(x)
    for kind, _s, i0, H, seed in D.injection_cases(e, steps, seeds, 0):
        if kind not in KINDS:
            continue
        y = D.inject(kind, steps, x, i0, D.noise_at(x, i0), H, np.random.default_rng(seed), places)
        if y is None:
            continue
        events = [("loss", int(s), float(v), D._lr(lr)) for s, v, lr in zip(steps, y, lrs)]
        fired = [(a.kind, a.severity, int(a.step)) for a in alerts(events, preset=e.preset)
                 if a.status == "firing" and a.severity in RANK and a.step >= steps[i0]]
        out.append((e.name, kind, fired))
    return out


def refires(fired) -> int:
    """Firings of a kind at a severity it already fired at (an escalation is not one)."""
    top, n = {}, 0
    for kind, sev, _step in fired:
        n += kind in top and RANK[sev] <= top[kind]
        top[kind] = max(top.get(kind, 0), RANK[sev])
    return n


def report(rows) -> list[str]:
    caught = [f for _log, _kind, f in rows if f]
    kinds = collections.Counter(len({k for k, _s, _t in f}) for f in caught)
    pairs = collections.Counter(" + ".join(sorted({k for k, _s, _t in f})) for f in caught
                                if len({k for k, _s, _t in f}) > 1)
    lines = [f"- incidents caught (a page from the onset on): {len(caught)} of {len(rows)}",
             f"- firings per caught incident: mean {sum(map(len, caught)) / max(len(caught), 1):.2f}; "
             + ", ".join(f"{n}: {c}" for n, c in sorted(collections.Counter(map(len, caught)).items())),
             "- distinct kinds per incident: " + ", ".join(f"{n}: {c}" for n, c in sorted(kinds.items())),
             f"- re-firings (a kind again at a severity it had fired at): {sum(map(refires, caught))} "
             f"in {sum(1 for f in caught if refires(f))} incidents",
             "- kinds sharing an incident: " + "; ".join(f"{p} {c}" for p, c in pairs.most_common())]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    t0 = time.time()
    logs = [e for e in D.entries() if e.label == "clean"]
    with mp.Pool(a.workers) as pool:
        rows = [r for rs in pool.imap_unordered(_log, [(e, a.seeds) for e in logs]) for r in rs]
    rows.sort()
    print("\n".join(report(rows)))
    print(f"\n{time.time() - t0:.0f} s, seeds={a.seeds}, workers={a.workers}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
