"""First pages' messages of the detection harness (same cases as tests/bench/detection.py)."""
import json, sys, collections, re
sys.path.insert(0, "tests/bench"); sys.path.insert(0, "tests")
import detection as d
MSG = []
def first_page(mon, steps, x, lrs, start):
    for i in range(start, len(x)):
        st = mon.update_loss(int(steps[i]), float(x[i]), d._lr(lrs[i]))
        for f in st.findings:
            if f.active and f.severity in d.PAGE:
                MSG.append((f.kind, f.severity, f.message))
                return int(steps[i]), f.kind
    MSG.append(None)
    return None, None
d.first_page = first_page
es = d.entries(); stats = d.calibration_pass(1)
thr = {g: d.thresholds(stats, g) for g in sorted({e.group for e in es})}
out = []
for e in es:
    if e.label == "clean" and d.load(e).n_loss >= 300:
        MSG.clear()
        recs = d._inject_log((e, thr[e.group], 2, 0))
        msgs = [m for m in MSG]
        assert len(msgs) == len(recs)
        for r, m in zip(recs, msgs):
            out.append({"kind": r["kind"], "ours": r["ours"], "page": m})
json.dump(out, open(sys.argv[1], "w"))
