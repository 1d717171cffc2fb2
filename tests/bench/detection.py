"""Detection benchmark, leave-one-source-out: real logs, injected failures, baselines.

    .venv/bin/python tests/bench/detection.py [--seeds 2] [--workers 2] [--json out.json]

Every log of ../shared/data/real-logs and real-logs-lr, and our own small runs
(tests/own_runs.py), grouped by source (tests/corpus.py). For each group held out, every
threshold the harness chooses (our `effect` gates, each baseline's alarm level) is
chosen by `calibrate.choose` from the *other* groups' clean logs, and the held-out
group is scored with it:

1. **Real logs**: clean and "unknown" logs must raise no warning/critical alert;
   anomalous ones must be caught. Pages per group and per 100k clean steps.
2. **Injected failures** into every clean log with at least 300 loss points, at onsets
   drawn in [30%, 70%] of the run, at the magnitudes a user wants paged: ramps reaching
   max(3% of the loss level, 4 sigma) and max(8%, 8 sigma) over H steps (H drawn in
   [1000, 3000], at least 20 points, at most half of what is left of the run), a rising
   floor, a divergence (exponential growth through the 8% size at 0.2 H), an LR blow-up
   (noisy exponential growth from 1 sigma), a sustained shift and a
   50-step spike; stagnations (the trend frozen) only where the clean run still had at
   least 3 sigma to fall. Sub-percent injections (3 sigma ramps on smooth logs) are
   reported apart (``small_*``). Delays are exact; a page before the onset is a false
   alarm, not a detection.
3. **Robustness**: every clean log scaled x0.01 and x100, offset +1000, logged every 10th
   step, every step twice, with a 20% gap and with a resume: pages must stay 0.

Baselines get the same treatment (`calibrate`): each one's threshold from the other
groups' clean logs.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "bench"), str(ROOT / "tests")]

import calibrate  # noqa: E402
from _baselines import STATS, WARM, first_cross  # noqa: E402
from corpus import TRANSFORMS, entries, printed, transform  # noqa: E402

from wtwin.detect import RunMonitor  # noqa: E402
from wtwin.detect.resolution import RAW  # noqa: E402

BASELINES = ("cusum", "page_hinkley", "rolling_z", "rule15", "rule15_tuned")
PAGE = ("warning", "critical")
USER = ("ramp3_linear", "ramp3_quadratic", "ramp3_sigmoid", "ramp8_linear", "floor3",
        "divergence", "lr_blowup", "stagnation", "shift", "spike")
SMALL = ("small_linear", "small_shift")
KINDS = USER + SMALL
PROGRESSIVE = ("ramp3_linear", "ramp3_quadratic", "ramp3_sigmoid", "ramp8_linear", "floor3",
               "divergence", "lr_blowup")


def load(e):
    if e.path is None:
        import own_runs
        return own_runs.load(e.name)
    from wtwin.offline.logs import read_log
    return read_log(e.path)


def loss_points(log) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pts = [(s, v, np.nan if lr is None else lr) for kind, s, v, lr in log.events() if kind == "loss"]
    a = np.array(pts, float).reshape(-1, 3)
    fin = np.isfinite(a[:, 1])
    return a[fin, 0], a[fin, 1], a[fin, 2]


def monitor(e, gates: dict | None = None) -> RunMonitor:
    return RunMonitor(e.preset, effect=dict(gates or {}))


def feed(mon, events) -> list[tuple[int, str, str]]:
    """Every finding that became active: (step, kind, severity)."""
    out = []
    for kind, step, v, lr in events:
        st = mon.update_loss(step, v, lr) if kind == "loss" else mon.update_eval(step, {"val_loss": v})
        for f in (st.findings if st else ()):
            if f.active:
                out.append((f.step, f.kind, f.severity))
    return out


def _lr(v):
    return None if v is None or not math.isfinite(v) else float(v)


# --- pass 1: the statistics thresholds are chosen from ----------------------------------
def _stats(e) -> dict:
    log = load(e)
    mon = monitor(e)
    feed(mon, log.events())
    rec = {"log": e.name, "group": e.group, "label": e.label,
           "stats": calibrate.log_stats(mon.peak_scores), "peaks": dict(mon.peak_scores)}
    _, x, _ = loss_points(log)
    rec["base"] = {b: (float(np.max(STATS[b](x)[max(1, int(WARM * len(x))):]))
                       if len(x) > 40 else -math.inf) for b in BASELINES}
    return rec


def calibration_pass(workers: int = 2) -> list[dict]:
    quiet = [e for e in entries() if e.label != "anomalous"]
    with mp.Pool(workers) as pool:
        return pool.map(_stats, quiet)


def thresholds(stats: list[dict], exclude: str | None) -> dict:
    """Every threshold for the group ``exclude`` held out (None: all groups)."""
    out = {}
    for g in calibrate.GATES:
        groups = calibrate.by_group([(r["group"], r["stats"][g]) for r in stats])
        out[g] = calibrate.choose(groups, exclude, calibrate.FLOORS[g])
    for b in BASELINES:
        groups = calibrate.by_group([(r["group"], r["base"][b]) for r in stats])
        out[b] = calibrate.choose(groups, exclude) * 1.0001 + 1e-12
    out["rule15"] = 0.1      # the DESIGN's rule as stated, not tuned
    return out


# --- pass 2: the held-out group scored ----------------------------------------------------
def _score_real(args) -> dict:
    e, thr = args
    log = load(e)
    found = feed(monitor(e, {g: thr[g] for g in calibrate.GATES}), log.events())
    pages = [f for f in found if f[2] in PAGE]
    return {"log": e.name, "group": e.group, "label": e.label, "steps": log.n_loss,
            "pages": pages[:6], "n_pages": len(pages), "n_info": sum(f[2] == "info" for f in found)}


def _score_robust(args) -> list[dict]:
    e, thr = args
    events = list(load(e).events())
    out = []
    for how in TRANSFORMS:
        found = feed(monitor(e, {g: thr[g] for g in calibrate.GATES}), transform(events, how))
        pages = [f for f in found if f[2] in PAGE]
        out.append({"log": e.name, "group": e.group, "transform": how, "pages": pages[:3]})
    return out


# --- injections ---------------------------------------------------------------------------
def noise_at(x, i0):
    lo, hi = max(0, i0 - 300), min(len(x), i0 + 300)
    seg = x[lo:hi]
    from scipy.ndimage import median_filter
    r = seg - median_filter(seg, size=21, mode="nearest")
    return float(1.4826 * np.median(np.abs(r - np.median(r)))) + 1e-12


def _trend(x):
    from scipy.ndimage import uniform_filter1d
    return uniform_filter1d(x, size=51, mode="nearest")


def inject(kind, steps, x, i0, sigma, H, rng, places: int = RAW):
    """The curve with the failure ``kind`` from index ``i0`` on (None: not applicable),
    printed as the log prints it: rounded to ``places`` decimals (`print_places`) unless the
    log is not rounded (`RAW`). A ramp added in full precision to a log printed at 4
    decimals made its flat stretches' second differences 1e-12 where the print gives 0,
    and the frozen data loader paged 15 injected failures of one BERT-NER log at the same
    step, all counted as caught."""
    y = _inject(kind, steps, x, i0, sigma, H, rng)
    if y is not None and places < RAW:
        y[i0:] = [round(float(v), places) for v in y[i0:]]
    return y


def _inject(kind, steps, x, i0, sigma, H, rng):
    t = np.where(steps >= steps[i0], steps - steps[i0], 0.0)
    on = steps >= steps[i0]
    level = float(np.median(x[max(0, i0 - 100): i0 + 1]))
    a3, a8 = max(0.03 * abs(level), 4 * sigma), max(0.08 * abs(level), 8 * sigma)
    u = np.minimum(t / H, 1.0)
    y = x.copy()
    if kind == "ramp3_linear":
        y += on * a3 * u
    elif kind == "ramp3_quadratic":
        y += on * a3 * u ** 2
    elif kind == "ramp3_sigmoid":
        y += on * a3 / (1 + np.exp(-(t - H / 2) / (H / 10)))
    elif kind == "ramp8_linear":
        y += on * a8 * u
    elif kind == "floor3":
        y += on * a3 * (1 - np.exp(-2 * t / H))
    elif kind == "divergence":      # explosive: reaches the 8% ramp's size at 0.2 H, then grows
        y += on * a8 * (np.exp(np.minimum(t / (0.3 * H), 50)) - 1)
    elif kind == "lr_blowup":
        g = np.exp(np.minimum(t / (0.3 * H), 50)) - 1
        y += on * sigma * (g + rng.standard_normal(len(x)) * np.minimum(g, 20) * 0.5)
    elif kind == "stagnation":
        tr = _trend(x)
        if (tr[i0] - tr[-1]) < 3 * sigma:
            return None
        y = np.where(on, x - tr + tr[i0], x)
    elif kind == "shift":
        y += on * a3
    elif kind == "spike":
        y += on * (t < 50) * a8
    elif kind == "small_linear":
        y += on * 3 * sigma * u
    elif kind == "small_shift":
        y += on * 3 * sigma
    return y


def first_page(mon, steps, x, lrs, start):
    for i in range(start, len(x)):
        st = mon.update_loss(int(steps[i]), float(x[i]), _lr(lrs[i]))
        for f in st.findings:
            if f.active and f.severity in PAGE:
                return int(steps[i]), f.kind
    return None, None


def print_places(x) -> int:
    """The decimals the loss values ``x`` are printed with (`RAW`: not rounded)."""
    return printed([("loss", 0, float(v)) for v in x])


def injection_cases(e, steps, seeds: int, salt: int) -> list[tuple]:
    """The failures injected into log ``e``: ``(kind, seed, i0, H, rng seed)`` per kind
    and seed, drawn from the log's name (and ``salt``), so every script draws the same."""
    n = len(steps)
    rng = np.random.default_rng(sum(map(ord, e.name)) + 1_000_003 * salt)
    cases = []
    for kind in KINDS:
        for s in range(seeds):
            frac, hh, seed = rng.uniform(0.3, 0.7), rng.uniform(1000, 3000), int(rng.integers(2**31))
            i0 = int(np.searchsorted(steps, steps[0] + frac * (steps[-1] - steps[0])))
            gap = (steps[-1] - steps[0]) / max(n - 1, 1)
            H = min(max(hh, 20 * gap), 0.5 * (steps[-1] - steps[i0]))
            cases.append((kind, s, i0, H, seed))
    return cases


def _inject_log(args) -> list[dict]:
    e, thr, seeds, salt = args
    steps, x, lrs = loss_points(load(e))
    n = len(x)
    cases = injection_cases(e, steps, seeds, salt)
    places = print_places(x)
    gates = {g: thr[g] for g in calibrate.GATES}
    onsets = sorted({c[2] for c in cases})
    mon, snaps, j = monitor(e, gates), {}, 0
    for i in range(n):
        if j < len(onsets) and i == onsets[j]:
            snaps[i] = mon.snapshot()
            j += 1
        mon.update_loss(int(steps[i]), float(x[i]), _lr(lrs[i]))
    out = []
    for kind, s, i0, H, seed in cases:
        sigma = noise_at(x, i0)
        y = inject(kind, steps, x, i0, sigma, H, np.random.default_rng(seed), places)
        if y is None:
            continue
        m = monitor(e, gates)
        m.restore(snaps[i0])
        hit, hk = first_page(m, steps, y, lrs, i0)
        rec = {"log": e.name, "group": e.group, "kind": kind, "seed": s, "points": n,
               "onset": int(steps[i0]),
               "H": float(H), "sigma": sigma, "ours": None if hit is None else hit - int(steps[i0]),
               "ours_kind": hk}
        for b in BASELINES:
            k = first_cross(STATS[b](y), thr[b], max(1, int(WARM * n)))
            rec[b] = None if k is None else int(steps[k]) - int(steps[i0])
            rec[b + "_fa"] = k is not None and k < i0
        out.append(rec)
    return out


# --- report -------------------------------------------------------------------------------
def pct(v, q):
    return "-" if not v else f"{np.percentile(v, q):.0f}"


def summarize(recs, methods, kinds=KINDS):
    rows = []
    for kind in kinds:
        rs = [r for r in recs if r["kind"] == kind]
        if not rs:
            continue
        row = {"kind": kind, "n": len(rs)}
        for m in methods:
            d = [r[m] for r in rs if r[m] is not None and r[m] >= 0 and not r.get(m + "_fa")]
            every = sorted(d) + [math.inf] * (len(rs) - len(d))
            med_all = every[(len(every) - 1) // 2] if every else math.inf
            row[m] = {"rate": len(d) / len(rs), "median": pct(d, 50), "p90": pct(d, 90),
                      "median_all": "miss" if med_all == math.inf else f"{med_all:.0f}",
                      "fa_before_onset": sum(bool(r.get(m + "_fa")) for r in rs)}
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--salt", type=int, default=0, help="draw other onsets")
    ap.add_argument("--no-inject", action="store_true")
    ap.add_argument("--no-robust", action="store_true")
    a = ap.parse_args(argv)
    es = entries()
    if not any(e.path for e in es):
        print("no real logs at ../shared/data", file=sys.stderr)
        return 2
    t0 = time.time()
    stats = calibration_pass(a.workers)
    groups = sorted({e.group for e in es})
    thr = {g: thresholds(stats, g) for g in groups}
    shipped = thresholds(stats, None)
    with mp.Pool(a.workers) as pool:
        real = pool.map(_score_real, [(e, thr[e.group]) for e in es])
        clean300 = [e for e in es if e.label == "clean" and load(e).n_loss >= 300]
        recs = [] if a.no_inject else [r for rs in pool.imap_unordered(
            _inject_log, [(e, thr[e.group], a.seeds, a.salt) for e in clean300]) for r in rs]
        robust = [] if a.no_robust else [r for rs in pool.imap_unordered(
            _score_robust, [(e, thr[e.group]) for e in es if e.label != "anomalous"]) for r in rs]
    report(es, stats, thr, shipped, real, recs, robust, time.time() - t0, a)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(
            {"stats": stats, "thresholds": thr, "shipped": shipped, "real": real, "injected": recs,
             "robust": robust}, indent=1, default=str))
    return 0


def report(es, stats, thr, shipped, real, recs, robust, secs, a):
    quiet = [r for r in real if r["label"] != "anomalous"]
    groups = sorted({e.group for e in es})
    st = {g: {k: max([r["stats"][k] for r in stats if r["group"] == g], default=0.0)
              for k in calibrate.GATES} for g in groups}
    print("## Leave-one-source-out: clean and unknown logs, per held-out group\n")
    print("| group | logs | loss points | pages | per 100k | "
          + " | ".join(f"{k} (margin)" for k in calibrate.GATES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(calibrate.GATES))
    rates = []
    for g in groups:
        rs = [r for r in quiet if r["group"] == g]
        if not rs:
            continue
        n, p = sum(r["steps"] for r in rs), sum(r["n_pages"] for r in rs)
        rates.append(p / max(n, 1) * 1e5)
        cells = " | ".join(f"{thr[g][k]:.2f} ({thr[g][k] / st[g][k]:.1f}x)" if st[g][k] > 0
                           else f"{thr[g][k]:.2f} (-)" for k in calibrate.GATES)
        print(f"| {g} | {len(rs)} | {n} | {p} | {rates[-1]:.2f} | {cells} |")
    tot_n, tot_p = sum(r["steps"] for r in quiet), sum(r["n_pages"] for r in quiet)
    print(f"\nTotal: {tot_p} pages on {len(quiet)} clean/unknown logs, {tot_n} loss points = "
          f"{tot_p / tot_n * 1e5:.2f} per 100k; mean over {len(rates)} groups "
          f"{np.mean(rates):.2f} per 100k.")
    paged = [r for r in quiet if r["n_pages"]]
    for r in paged:
        print(f"  paged: {r['log']} ({r['group']}): {r['pages']}")
    print("\n## Anomalous logs (held-out thresholds)\n")
    for r in real:
        if r["label"] == "anomalous":
            print(f"- {r['log']}: {', '.join(f'{s} {k} {sv}' for s, k, sv in r['pages'][:3]) or 'MISSED'}")
    print(f"\nShipped defaults (the procedure on all {len(groups)} groups): " + ", ".join(
        f"{k}={shipped[k]:.3g}" for k in calibrate.GATES))
    if recs:
        methods = ("ours",) + BASELINES
        print("\n## Injected failures (held-out thresholds)\n")
        print("Each cell: rate / median delay / p90 / median over all cases (misses infinitely late).\n")
        print("| kind | n | " + " | ".join(methods) + " |")
        print("|---|---|" + "---|" * len(methods))
        for row in summarize(recs, methods):
            cells = " | ".join(f"{row[m]['rate']:.0%} / {row[m]['median']} / {row[m]['p90']} / "
                               f"{row[m]['median_all']}" for m in methods)
            print(f"| {row['kind']} | {row['n']} | {cells} |")
        prog = [r for r in recs if r["kind"] in PROGRESSIVE]
        for m in methods:
            d = [r[m] for r in prog if r[m] is not None and r[m] >= 0 and not r.get(m + "_fa")]
            print(f"- progressive user-scale, {m}: {len(d)}/{len(prog)} = {len(d) / len(prog):.1%}, "
                  f"median delay {pct(d, 50)}, pre-onset alarms "
                  f"{sum(bool(r.get(m + '_fa')) for r in prog)}")
        for name, rs in (("logs >= 3000 points", [r for r in prog if r["points"] >= 3000]),
                         ("logs < 3000 points", [r for r in prog if r["points"] < 3000])):
            c = sum(r["ours"] is not None and r["ours"] >= 0 for r in rs)
            print(f"- progressive user-scale, ours, {name}: {c}/{len(rs)} = {c / max(len(rs), 1):.1%}")
        byg = {}
        for r in prog:
            byg.setdefault(r["group"], []).append(r["ours"] is not None and r["ours"] >= 0)
        print(f"- ours, mean over {len(byg)} groups of the per-group progressive rate: "
              f"{np.mean([np.mean(v) for v in byg.values()]):.1%}")
    if robust:
        print("\n## Robustness (clean/unknown logs, held-out thresholds): logs paged per transform\n")
        for how in TRANSFORMS:
            rs = [r for r in robust if r["transform"] == how]
            bad = [r for r in rs if r["pages"]]
            print(f"- {how}: {len(bad)} of {len(rs)}" + "".join(
                f"\n    {r['log']}: {r['pages']}" for r in bad[:5]))
    print(f"\n{secs:.0f} s, seeds={a.seeds}, salt={a.salt}, workers={a.workers}")


if __name__ == "__main__":
    sys.exit(main())
