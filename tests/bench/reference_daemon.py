"""The daemon-side cost of a reference: RunState.observe_loss with none and with one
(docs/REFERENCES.md, "What it costs"). Run: nice python tests/bench/reference_daemon.py"""
import random, time, sys
from wtwin.daemon.run_state import RunState
from wtwin.daemon.references import RunReference
from wtwin.detect.reference import ReferenceCurve, ReferenceTracker
N = 20000
rng = random.Random(0)
ref = ReferenceCurve("a", range(1, N + 1), [2 + 3 * s ** -0.5 + rng.gauss(0, .02) for s in range(1, N + 1)])
losses = [2 + 3 * s ** -0.5 + rng.gauss(0, .02) for s in range(1, N + 1)]
def run(with_ref):
    r = RunState("b", preset="pretraining", cooldown_s=0, now=0.0, keep_history=False)
    if with_ref:
        r.refs = RunReference(["a"], None); r.refs.tracker = ReferenceTracker([ref])
    t = time.perf_counter()
    for s, l in enumerate(losses, 1):
        r.observe_loss(s, l, None, None, None, 1.0)
    return (time.perf_counter() - t) / N * 1e6
for rep in range(3):
    print(f"no reference {run(False):.1f} us/loss   one reference {run(True):.1f} us/loss")
