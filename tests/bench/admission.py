"""Per-event cost of admission (issue 15): the principal from the run's secret, the owner
check, the emitter-id quota and the last-seen mark, for 200,000 loss events of one run.

    .venv/bin/python tests/bench/admission.py

Best of 5 passes, in process, no sockets: what the ingest body (daemon/ingest.py) pays on top of
its path before issue 15.
"""

from __future__ import annotations

import time

from wtwin.daemon.admission import Admission
from wtwin.daemon.config import RunsConfig
from wtwin.daemon.run_table import RunTable
from wtwin.daemon.stats import Stats


def main(n: int = 200_000, repeat: int = 5) -> None:
    table = RunTable(preset="pretraining", cooldown_s=60, max_runs=10)
    adm = Admission(RunsConfig(), table, Stats(), lambda ident, frame: True, curve=False)
    events = [{"type": "loss", "run": "r", "seq": i, "step": i, "loss": 1.0, "emitter": "e",
               "auth": "s" * 43} for i in range(n)]
    best = float("inf")
    for _ in range(repeat):
        batch = [dict(e) for e in events]
        t0 = time.perf_counter()
        for ev in batch:
            run = adm.admit(ev["run"], ev["emitter"], b"id", adm.principal_of(ev.pop("auth"), None), 0.0)
            run.marks.sent("e", b"id", 0.0)
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"admission: {best * 1e6:.3f} us per event (best of {repeat} x {n:,})")


if __name__ == "__main__":
    main()
