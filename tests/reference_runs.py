"""Own pairs of runs for the reference detector (issue 26): real torch training on
scikit-learn's bundled ``load_digits`` (no download), CPU, seconds a run.

An MLP (64-64-10) trained with Adam, 1,400 training digits, batches of 32, ``STEPS``
steps, lr ``LR`` with a 50-step linear warm-up and a cosine decay to a tenth. Each run
is one ``change`` against the baseline:

- ``base``: the baseline (runs that differ only by seed);
- ``bf16`` / ``fp16``: the forward pass under CPU autocast (torch.autocast("cpu"));
- ``bf16_weights``: the model and Adam's state in bfloat16, no fp32 master weights (late
  updates, smaller than a weight's bf16 resolution, are lost);
- ``lr_half``: the lr schedule at half its height;
- ``lr_tenth``, ``lr_stuck`` (a sweep's members, `SWEEP`, not in `pairs`): the schedule at a
  tenth of its height (slower, still learning) and at 250x (Adam at a peak of 0.5: the
  loss rises from 1.5 to about 2.0 in its first 200 steps and stays there, stuck);
- ``label_noise``: 20% of the training labels replaced by random ones (fixed per seed);
- ``resumed``: at step ``RESUME`` the run restarts from its checkpoint of ``REWIND``
  steps earlier with a fresh optimizer (no Adam moments), its step counter and lr
  schedule continuing (what a resume that lost the optimizer file and the latest
  checkpoint does).

A run is written once as ``<cache>/<change>_s<seed>.csv`` (``step,loss,lr``) and read
back after; ``cache`` is ``$WTWIN_REFERENCE_RUNS`` or ``~/.cache/wtwin/reference_runs``.

    python tests/reference_runs.py            # trains what the cache lacks, prints a table
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import sys
from pathlib import Path

STEPS, LR, WARMUP, BATCH = 2000, 2e-3, 50, 32
RESUME, REWIND = 1000, 800
CHANGES = ("base", "bf16", "fp16", "bf16_weights", "lr_half", "label_noise", "resumed")
ONSET = {"resumed": RESUME}   # where a change starts (the others: step 1)
# changes that must stay silent: a seed, and CPU autocast, which does not make this MLP
# slower (against fp32 of the same seed the last 200 steps average the same loss to 5e-4)
SAME = ("seed", "bf16", "fp16")
SWEEP = ("lr_tenth", "lr_stuck")       # an lr sweep's members: `sweep_cases`
PEAK = {"lr_half": LR / 2, "lr_tenth": LR / 10, "lr_stuck": LR * 250}
BASE_SEEDS = tuple(range(21))          # 21 runs: 20 consecutive seed-only pairs
CHANGE_SEEDS = tuple(range(100, 105))  # 5 runs a change, each against a base of another seed


def cache_dir() -> Path:
    d = os.environ.get("WTWIN_REFERENCE_RUNS") or Path.home() / ".cache" / "wtwin" / "reference_runs"
    return Path(d)


def lr_at(step: int, change: str = "base") -> float:
    """The schedule: linear warm-up over ``WARMUP`` steps, cosine to LR/10 at STEPS."""
    peak = PEAK.get(change, LR)
    if step <= WARMUP:
        return peak * step / WARMUP
    t = (step - WARMUP) / (STEPS - WARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(change: str, seed: int, steps: int = STEPS) -> list[tuple[int, float, float]]:
    """Train one run; its ``(step, loss, lr)`` rows."""
    import copy

    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    if change not in CHANGES + SWEEP:
        raise ValueError(f"change must be one of {CHANGES + SWEEP}, got {change!r}")
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))[:1400]
    X, y = torch.tensor(X[perm] / 16.0, dtype=torch.float32), torch.tensor(y[perm])
    if change == "label_noise":
        flip = torch.tensor(rng.random(len(y)) < 0.2)
        y = torch.where(flip, torch.tensor(rng.integers(0, 10, len(y))), y)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    if change == "bf16_weights":
        model, X = model.to(torch.bfloat16), X.to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=lr_at(1, change))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(change)
    rows, order, at, saved = [], rng.permutation(len(X)), 0, {}
    for step in range(1, steps + 1):
        if change == "resumed" and step == RESUME - REWIND:
            saved = copy.deepcopy(model.state_dict())
        if change == "resumed" and step == RESUME:
            model.load_state_dict(saved)
            opt = torch.optim.Adam(model.parameters(), lr=lr_at(step, change))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, change)
        if at + BATCH > len(X):
            order, at = rng.permutation(len(X)), 0
        idx = torch.tensor(order[at:at + BATCH])
        at += BATCH
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(X[idx]).float(), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        rows.append((step, float(loss.item()), opt.param_groups[0]["lr"]))
    return rows


def load(change: str, seed: int) -> list[tuple[int, float, float]]:
    """The run's rows, trained and cached on first use."""
    path = cache_dir() / f"{change}_s{seed}.csv"
    if not path.exists():
        rows = train(change, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("step", "loss", "lr"))
            w.writerows((s, repr(l), repr(r)) for s, l, r in rows)
        tmp.replace(path)
    with open(path) as f:
        return [(int(r["step"]), float(r["loss"]), float(r["lr"])) for r in csv.DictReader(f)]


def pairs() -> list[tuple[str, tuple[str, int], tuple[str, int]]]:
    """``(label, live, reference)``: 20 seed-only pairs, then each change against a
    baseline of another seed."""
    out = [("seed", ("base", a), ("base", b)) for a, b in zip(BASE_SEEDS, BASE_SEEDS[1:])]
    for change in CHANGES[1:]:
        out += [(change, (change, s), ("base", BASE_SEEDS[i])) for i, s in enumerate(CHANGE_SEEDS)]
    return out


SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "real-logs"
SHARED_3 = SHARED.parent / "real-logs-3"
_L, _B7, _B10, _M = "llmc__", "mlperf07__bert_", "mlperf10__bert_supermicro_", "mng__2024-"
_P = "lightning_pinn_pendulum_"   # real-logs-3: a physics-informed net's versions, 38 -> 1e-4
# (source, label, live, references): "equal" pairs must stay silent, "hurt" ones page,
# "other" ones are shown (a different system, optimizer or schedule: no verdict expected)
SHARED_PAIRS = (
    ("llmc", "equal", _L + "SiddanthEmani_gpt2_124M_main", (_L + "HectorFCardenas_gpt2_124M_job11685414",)),
    ("llmc", "equal", _L + "HectorFCardenas_gpt2_124M_job11685414", (_L + "SiddanthEmani_gpt2_124M_main",)),
    ("llmc", "equal", _L + "HectorFCardenas_gpt2_124M_job11672114_truncated", (_L + "HectorFCardenas_gpt2_124M_job11685414",)),
    ("llmc", "equal", _L + "HectorFCardenas_gpt2_124M_job11685414", (_L + "HectorFCardenas_gpt2_124M_job11672114_truncated",)),
    ("mlperf07", "equal", _B7 + "dgx1_result9_aborted", (_B7 + "dgx1_result0_success",)),
    ("mlperf07", "equal", _B7 + "dgx1_result0_success", (_B7 + "dgx1_result9_aborted",)),
    ("mlperf07", "equal", _B7 + "dgxa100n2_result6_aborted", (_B7 + "dgxa100n2_result0_success",)),
    ("mlperf07", "equal", _B7 + "dgxa100n2_result0_success", (_B7 + "dgxa100n2_result6_aborted",)),
    ("mlperf10", "equal", _B10 + "sys420gp_result1_success", (_B10 + "as4124go_result1_success",)),
    ("mlperf10", "equal", _B10 + "as4124go_result1_success", (_B10 + "sys420gp_result1_success",)),
    ("mng", "equal", _M + "10-20_ScaleUp1B_ad8d7ae5", (_M + "10-20_ScaleUp1B_87bd51fd",)),
    ("mng", "equal", _M + "10-20_ScaleUp1B_87bd51fd", (_M + "10-20_ScaleUp1B_ad8d7ae5",)),
    *(("mlperf10", "hurt", _B10 + bad, (_B10 + good,))
      for bad in ("as2124gq_result1_aborted_stuck", "as2124gq_result4_aborted_lateescape",
                  "as2124gq_result6_aborted_diverged")
      for good in ("as4124go_result1_success", "sys420gp_result1_success")),
    ("mlperf10", "hurt", _B10 + "as2124gq_result1_aborted_stuck",
     (_B10 + "as4124go_result1_success", _B10 + "sys420gp_result1_success")),
    ("mlperf07", "other", _B7 + "dgxa100_result6_success", (_B7 + "dgx1_result0_success",)),
    ("mng", "other", _M + "10-29_Optimizers_Adam_95a9fd44", (_M + "10-29_Optimizers_Muon_8d6193f4",)),
    ("mng", "other", _M + "10-20_ScaleUp1B_87bd51fd", (_M + "10-20_ScaleUp1B_c0078066",)),
    # the same problem, successive versions: two long runs, two short controls; the early
    # versions stuck at 0.31 (a trivial solution) and a short one stuck at 4-9
    ("pinn", "equal", _P + "v28_long", (_P + "v32_long",)),
    ("pinn", "equal", _P + "v32_long", (_P + "v28_long",)),
    ("pinn", "equal", _P + "v23_control", (_P + "v24_control",)),
    ("pinn", "equal", _P + "v24_control", (_P + "v23_control",)),
    ("pinn", "hurt", _P + "v8_stuck", (_P + "v28_long", _P + "v32_long")),
    ("pinn", "hurt", _P + "v11_stuck", (_P + "v28_long", _P + "v32_long")),
    ("pinn", "hurt", _P + "v25_stuck_high", (_P + "v23_control", _P + "v24_control")),
)


def shared_rows(name: str) -> list[tuple[int, float, float]]:
    """A shared log's ``(step, loss, nan)`` rows (its eval loss when it has no train loss)."""
    from wtwin.offline.logs import read_log

    path = SHARED / f"{name}.csv"
    log = read_log(str(path if path.exists() else SHARED_3 / f"{name}.csv"))
    return [(s, v, math.nan) for k, s, v, *_ in log.events() if k == "loss" and v is not None]


def curve(name: str, rows, use_lr: bool = True):
    from wtwin.detect.reference import ReferenceCurve

    st, lo, lr = zip(*rows)
    return ReferenceCurve(name, st, lo, lr if use_lr else None)


def judge(rows, refs: list, config=None, use_lr: bool = True) -> dict:
    """One live run against its references: the first ``behind`` and ``schedule_differs``
    steps (None: never), the largest material units, the number of behind episodes."""
    from wtwin.detect.reference import BEHIND, SCHEDULE, ReferenceConfig, ReferenceTracker

    tr = ReferenceTracker(refs, config or ReferenceConfig())
    first = sched = None
    episodes, prev, peak = 0, -1, 0.0
    for step, loss, lr in rows:
        k = tr.feed(step, loss, lr if use_lr else math.nan)
        if k == BEHIND and prev != BEHIND:
            episodes += 1
            first = step if first is None else first
        if k == SCHEDULE and sched is None:
            sched = step
        if k in (0, BEHIND):
            peak = max(peak, tr.verdict().units)
        prev = k
    return {"first": first, "sched": sched, "episodes": episodes, "peak": peak,
            "last": tr.verdict().state, "steps": rows[-1][0]}


def own_cases(use_lr: bool = True):
    """``(source, label, name, rows, refs, onset)`` for the own pairs."""
    for change, live, ref in pairs():
        rows = load(*live)
        yield ("own", "equal" if change in SAME else "hurt", f"{live[0]}_s{live[1]}", rows,
               [curve(f"{ref[0]}_s{ref[1]}", load(*ref), use_lr)], ONSET.get(change, 1))


def sweep_cases(changes=("lr_half",) + SWEEP):
    """``(change, name, rows, reference)``: each sweep member of `CHANGE_SEEDS` against a
    baseline at the full lr of another seed, both lrs sent (a sweep's group)."""
    for change in changes:
        for i, s in enumerate(CHANGE_SEEDS):
            yield (change, f"{change}_s{s}", load(change, s),
                   curve(f"base_s{BASE_SEEDS[i]}", load("base", BASE_SEEDS[i])))


def shared_cases():
    for source, label, live, refs in SHARED_PAIRS:
        rows = shared_rows(live)
        yield (source, label, live, rows, [curve(r, shared_rows(r)) for r in refs], rows[0][0])


def table(cases, config=None, use_lr: bool = True) -> list[str]:
    out = []
    for source, label, name, rows, refs, onset in cases:
        j = judge(rows, refs, config, use_lr)
        delay = "" if j["first"] is None else f" delay {j['first'] - onset} ({(j['first'] - onset) / j['steps']:.1%})"
        out.append(f"{source:9s} {label:6s} {name[:44]:44s} vs {','.join(r.name for r in refs)[:44]:44s} "
                   f"behind {j['first']} x{j['episodes']}{delay} sched {j['sched']} "
                   f"peak {j['peak']:.3f} last {j['last']}")
    return out


def summary(rows: list[dict]) -> list[str]:
    """Per source and label (own hurt pairs per change): pairs, paged, delays after the
    onset as a share of the run, schedule_differs."""
    groups: dict = {}
    for r in rows:
        key = (r["source"], r["label"], r["name"].rsplit("_s", 1)[0] if r["source"] == "own" else "")
        groups.setdefault(key, []).append(r)
    out = []
    for (source, label, change), rs in sorted(groups.items()):
        paged = [r for r in rs if r["first"] is not None]
        d = sorted((r["first"] - r["onset"]) / r["steps"] for r in paged)
        delays = f", delays {d[0]:.1%}..{d[-1]:.1%} of the run" if d else ""
        sched = sum(r["sched"] is not None for r in rs)
        out.append(f"{source:9s} {label:6s} {change:13s} lag {rs[0]['lag']}: {len(paged)} of {len(rs)} paged"
                   f"{delays}{f', {sched} schedule_differs' if sched else ''}")
    return out


def level(rows, halflife: float = 50.0) -> list[float]:
    """The EWMA level (half-life in steps, one loss a step) the detector compares."""
    a, out, lev = 0.5 ** (1.0 / halflife), [], rows[0][1]
    for _, x, _ in rows:
        lev = a * lev + (1.0 - a) * x
        out.append(lev)
    return out


def first_over(gap, envelope, start: int = 0, for_good: bool = False):
    """The first step (1-based) from ``start`` where ``gap`` exceeds ``envelope`` (and,
    ``for_good``, stays above it to the end); None: never."""
    over = [i for i in range(start, len(gap)) if gap[i] > envelope[i]]
    if not for_good or not over:
        return over[0] + 1 if over else None
    below = [i for i in range(start, len(gap)) if gap[i] <= envelope[i]]
    return None if below and below[-1] == len(gap) - 1 else (below[-1] + 2 if below else start + 1)


def bf16_weights_report(config=None) -> list[str]:
    """When bf16 weights (no fp32 master) becomes visible: per pair, the first step its
    level gap exceeds every seed-only pair's gap at that step (the envelope of the 20 seed
    pairs: no threshold on the gap could page earlier without paging one of them, in
    sample), the step it exceeds it for good, and the ``behind`` page (default config,
    one reference of another seed; four of them; the base run of the same seed), and the
    same-seed CPU autocast pairs (harmless) that page under ``config``. Last, against the
    same seed: the level gap at step 200 (10% of the run) in nats and in the reference's
    progress, and the first step from which it is over `ReferenceConfig.gate` (2%)."""
    warm = int(0.05 * STEPS)
    seeds = [(level(load("base", a)), level(load("base", b))) for a, b in zip(BASE_SEEDS, BASE_SEEDS[1:])]
    env = [max(la[i] - lb[i] for la, lb in seeds) for i in range(STEPS)]
    same = [[level(load(c, s))[i] - level(load("base", s))[i] for i in range(STEPS)]
            for c in ("bf16", "fp16") for s in CHANGE_SEEDS]   # a harmless change, same seed
    env_same = [max(g[i] for g in same) for i in range(STEPS)]
    out = [f"{'pair':34s} {'over seeds':>10s} {'for good':>9s} {'behind':>7s} {'4 refs':>7s} "
           f"{'same seed: over':>15s} {'behind':>7s}  (steps; the run has {STEPS})"]
    for i, s in enumerate(CHANGE_SEEDS):
        live = load("bf16_weights", s)
        ref = load("base", BASE_SEEDS[i])
        gap = [x - y for x, y in zip(level(live), level(ref))]
        own = load("base", s)
        gap_same = [x - y for x, y in zip(level(live), level(own))]
        four = [curve(f"base_s{b}", load("base", b)) for b in BASE_SEEDS[i + 5:i + 9]]
        cells = (first_over(gap, env, warm), first_over(gap, env, warm, True),
                 judge(live, [curve(f"base_s{BASE_SEEDS[i]}", ref)], config)["first"],
                 judge(live, four, config)["first"],
                 first_over(gap_same, env_same, warm), judge(live, [curve(f"base_s{s}", own)], config)["first"])
        out.append(f"bf16_weights_s{s} vs base_s{BASE_SEEDS[i]:<16d} " + " ".join(
            f"{'-' if c is None else c:>{w}}" for c, w in zip(cells, (10, 9, 7, 7, 15, 7))))
    for s in CHANGE_SEEDS:
        lv, lb = level(load("bf16_weights", s)), level(load("base", s))
        start = max(x[1] for x in load("base", s)[:10])
        units = [(a - b) / (start - b) for a, b in zip(lv, lb)]
        over = next((i + 1 for i in range(warm, STEPS) if units[i] > 0.02), None)
        out.append(f"bf16_weights_s{s} vs base_s{s}: gap at step 200 {lv[199] - lb[199]:+.3f} "
                   f"({units[199]:+.1%} of the progress), over 2% of it from step {over}")
    harmless = [judge(load(c, s), [curve(f"base_s{s}", load("base", s))], config)["first"]
                for c in ("bf16", "fp16") for s in CHANGE_SEEDS]
    out.append(f"same-seed CPU autocast bf16/fp16 vs base (10 harmless pairs): behind at {harmless}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-lr", action="store_true", help="withhold the lr columns")
    ap.add_argument("--shared", action="store_true", help="the shared real pairs instead")
    ap.add_argument("--loso", action="store_true",
                    help="leave-one-source-out: own and shared pairs, the gate calibrated on the others")
    ap.add_argument("--bf16", action="store_true",
                    help="when bf16 weights becomes visible against the seed pairs' spread")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a ReferenceConfig field (repeatable)")
    a = ap.parse_args(argv)
    from wtwin.detect.reference import ReferenceConfig

    config = ReferenceConfig(**{k: type(getattr(ReferenceConfig(), k))(v)
                                for k, v in (x.split("=", 1) for x in a.set)})
    if a.bf16:
        print("\n".join(bf16_weights_report(config)))
        return 0
    if a.loso:
        rows, (lag, lo, hi) = leave_one_source_out([*own_cases(not a.no_lr), *shared_cases()], config)
        for r in rows:
            print(" ".join(f"{k}={r[k]}" for k in ("source", "label", "name", "lag", "lo", "hi", "critical",
                                                    "first", "onset", "steps", "episodes", "sched", "last")),
                  flush=True)
        print("\n".join(summary(rows)))
        print(f"every source in: lag {lag} (lo {lo}, hi {hi}); ReferenceConfig().lag is {config.lag}")
        return 0
    cases = shared_cases() if a.shared else own_cases(not a.no_lr)
    for line in table(cases, config, use_lr=not a.no_lr):
        print(line, flush=True)
    return 0


LAGS = tuple(round(0.05 * i, 2) for i in range(1, 17))   # 0.05 .. 0.8
GOAL = 0.1      # a hurt pair is caught in time when it pages within this share of its run


def firsts(case, config) -> dict:
    """``lag -> first behind step`` (None: never) for each lag of `LAGS`."""
    _, _, _, rows, refs, _ = case
    return {g: judge(rows, refs, dataclasses.replace(config, lag=g))["first"] for g in LAGS}


def critical(first: dict) -> float:
    """An equal pair: the largest lag at which it pages (0.0: silent at every one)."""
    return max((g for g, f in first.items() if f is not None), default=0.0)


def reach(first: dict, onset: int, steps: int, lo: float):
    """A hurt pair: the largest lag above ``lo`` (where every equal pair is silent: a
    catch below it is no evidence) up to which it is still caught within `GOAL` of its
    run. None when it bounds nothing: not caught in time at the first lag above ``lo``
    (bf16 weights), or caught in time at every one (a run stuck above its reference's start)."""
    above = [g for g in LAGS if g > lo]
    ok = [first[g] is not None and first[g] - onset <= GOAL * steps for g in above]
    if not ok or not ok[0] or all(ok):
        return None
    return above[ok.index(False) - 1]


def calibrate(criticals, hurt=()) -> tuple:
    """``(lag, lo, hi)`` from pairs of other sources: ``lo`` the largest lag at which an
    equal pair pages, ``hi`` the largest at which every hurt pair (``(firsts, onset,
    steps)``) that bounds it is still caught in time (`reach`); ``lag`` their midpoint,
    the widest margin on both sides. With no ``hi``: the smallest of `LAGS` above ``lo``."""
    lo = max(criticals, default=0.0)
    his = [r for r in (reach(*h, lo) for h in hurt) if r is not None]
    if his:
        return round((lo + min(his)) / 2, 3), lo, min(his)
    return next((g for g in LAGS if g > lo), LAGS[-1]), lo, None


def leave_one_source_out(cases: list, config) -> tuple[list[dict], tuple]:
    """For each source: ``lag`` calibrated (`calibrate`) on the pairs of the other
    sources, then the held-out source's pairs judged with it (the rest: ``config``).
    Also `calibrate`'s answer with every source in (the shipped default)."""
    grid = {id(c): firsts(c, config) for c in cases if c[1] in ("equal", "hurt")}
    crit = {id(c): critical(grid[id(c)]) for c in cases if c[1] == "equal"}

    def on(pairs):
        return calibrate([crit[id(c)] for c in pairs if c[1] == "equal"],
                         [(grid[id(c)], c[5], c[3][-1][0]) for c in pairs if c[1] == "hurt"])

    out = []
    for source in sorted({c[0] for c in cases}):
        lag, lo, hi = on([c for c in cases if c[0] != source])
        cfg = dataclasses.replace(config, lag=lag)
        for c in (c for c in cases if c[0] == source):
            j = judge(c[3], c[4], cfg)
            out.append({"source": source, "label": c[1], "name": c[2], "lag": lag, "lo": lo, "hi": hi,
                        "critical": crit.get(id(c)), "onset": c[5], **j})
    return out, on(cases)


if __name__ == "__main__":
    sys.exit(main())
