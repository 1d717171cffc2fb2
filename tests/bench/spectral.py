"""fast engine vs weightwatcher 0.7.7 on the same weights, in one run.

    .venv/bin/python tests/bench/spectral.py [--threads 1] [--runs 3] [--repeat 1] [--skip-4096] [--cases gpt,gpt-t,1024,4096]

Cases: a 12-layer, 768-wide GPT-2-small-shaped model built in torch (torch's random
init, whose alphas are all above 6, and the same shapes with Student-t entries, whose
alphas are in 2..6; the tied 50257-row embedding is over weightwatcher's max_N and
skipped by both), a single 1024x4096 layer and a single 4096x4096 layer (Student-t, df 3). For each:
weightwatcher's ``analyze(detX=True)`` wall time, ours, the Gram+eigvalsh floor
(eigenvalues only, no fit), the ratio, and the agreement (max |d alpha| over layers
with alpha <= 6, spikes equal on every layer). Prints a markdown table; with
``--device cuda`` (or auto on a GPU machine) the fast figures are CUDA figures.

Each case is measured ``--runs`` times, weightwatcher and fast back to back within a
run, and the table gives the median of the per-run ratios (and median times): on a
shared machine the load moves between runs, a ratio taken within one run much less.
``--threads N`` gives both engines the same N cores: weightwatcher N BLAS threads
inside each SVD, fast N layers at once with one BLAS thread each; ``--ww-threads``
sets weightwatcher's apart (its OpenBLAS threads spin and collapse on a loaded VM).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import torch
from threadpoolctl import threadpool_limits

from wtwin.daemon.spectral import fast, reference
from wtwin.daemon.spectral.layers import select_layers


def gpt_state_dict(n_layer=12, d=768, vocab=50257, ctx=1024, seed=0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear
    sd = {"wte.weight": torch.nn.Embedding(vocab, d).weight, "wpe.weight": torch.nn.Embedding(ctx, d).weight}
    for i in range(n_layer):
        p = f"h.{i}."
        sd[p + "ln_1.weight"] = torch.ones(d)
        sd[p + "attn.c_attn.weight"] = lin(d, 3 * d).weight
        sd[p + "attn.c_proj.weight"] = lin(d, d).weight
        sd[p + "ln_2.weight"] = torch.ones(d)
        sd[p + "mlp.c_fc.weight"] = lin(d, 4 * d).weight
        sd[p + "mlp.c_proj.weight"] = lin(4 * d, d).weight
    sd["lm_head.weight"] = sd["wte.weight"]
    return {k: v.detach() for k, v in sd.items()}


def heavy_tailed(sd, df=3.0, seed=2):
    """The same shapes with Student-t entries: alphas inside 2..6, so agreement is tested."""
    torch.manual_seed(seed)
    return {k: (torch.distributions.StudentT(df).sample(v.shape).float() if k.endswith("weight") and v.dim() == 2
                and v.shape[0] < 50000 else v) for k, v in sd.items()}


def single(shape, seed=1):
    torch.manual_seed(seed)
    return {"w.weight": torch.distributions.StudentT(3.0).sample(shape).float()}


def timed(fn, repeat):
    """(best wall s, best CPU s of this process, result) over ``repeat`` calls."""
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def bench_case(name, sd, device, repeat, ww_repeat, threads, runs, ww_threads):
    specs = select_layers(sd)
    per_run = []
    for _ in range(runs):
        with threadpool_limits(limits=ww_threads):
            torch.set_num_threads(ww_threads)
            t_ww, c_ww, ref = timed(lambda: reference.analyze_layers(specs), ww_repeat)
            torch.set_num_threads(threads)
        t_fast, c_fast, ours = timed(lambda: fast.analyze_layers(specs, device=device, threads=threads), repeat)
        t_floor, c_floor, _ = timed(lambda: fast.eigenvalues(specs, device=device, threads=threads), repeat)
        d_alpha = max((abs(a.alpha - b.alpha) for a, b in zip(ours, ref) if b.alpha <= 6), default=0.0)
        spikes = all(a.num_pl_spikes == b.num_pl_spikes for a, b in zip(ours, ref))
        per_run.append({"ww": t_ww, "fast": t_fast, "floor": t_floor, "ratio": t_ww / t_fast,
                        "cww": c_ww, "cfast": c_fast, "cfloor": c_floor, "cratio": c_ww / c_fast,
                        "fratio": t_ww / t_floor, "d_alpha": d_alpha, "spikes": spikes,
                        "n_le6": sum(b.alpha <= 6 for b in ref)})
    med = {k: statistics.median(r[k] for r in per_run)
           for k in ("ww", "fast", "floor", "ratio", "cww", "cfast", "cfloor", "cratio", "fratio")}
    return {"case": name, "layers": len(specs), **med, "runs": per_run,
            "d_alpha": max(r["d_alpha"] for r in per_run), "spikes": all(r["spikes"] for r in per_run),
            "n_le6": per_run[0]["n_le6"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="BLAS/torch threads for both engines (default 1)")
    ap.add_argument("--runs", type=int, default=3, help="independent runs per case; the table has the medians")
    ap.add_argument("--repeat", type=int, default=1, help="best of N for the fast engine within a run")
    ap.add_argument("--ww-repeat", type=int, default=1, help="best of N for weightwatcher")
    ap.add_argument("--ww-threads", type=int, default=None,
                    help="BLAS/torch threads for weightwatcher (default: --threads)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip-4096", action="store_true", help="leave out the 4096x4096 case")
    ap.add_argument("--cases", default="gpt,gpt-t,1024,4096", help="comma-separated subset of gpt,gpt-t,1024,4096")
    args = ap.parse_args(argv)
    ww_threads = args.threads if args.ww_threads is None else args.ww_threads
    torch.set_num_threads(args.threads)
    device = fast.resolve_device(args.device)
    gpt = gpt_state_dict()
    wanted = set(args.cases.split(","))
    if args.skip_4096:
        wanted.discard("4096")
    cases = [(key, name, make) for key, name, make in (
        ("gpt", "GPT-style 12x768, torch init", lambda: gpt),
        ("gpt-t", "GPT-style 12x768, Student-t df=3", lambda: heavy_tailed(gpt)),
        ("1024", "1024x4096", lambda: single((1024, 4096))),
        ("4096", "4096x4096", lambda: single((4096, 4096)))) if key in wanted]
    load0 = f"{os.getloadavg()[0]:.1f}"
    reference.analyze_layers(select_layers(single((64, 32))))  # pay weightwatcher's import outside the timings
    with threadpool_limits(limits=args.threads):
        rows = [bench_case(name, make(), device, args.repeat, args.ww_repeat, args.threads, args.runs, ww_threads)
                for _, name, make in cases]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"threads: fast {args.threads}, weightwatcher {ww_threads}, device={device}, torch {torch.__version__}, "
          f"python {sys.version.split()[0]}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"load average before: {load0}, after: {os.getloadavg()[0]:.1f}; {args.runs} runs per case, medians; "
          f"fast: best of {args.repeat} per run, weightwatcher: best of {args.ww_repeat}")
    print("| case | layers | weightwatcher wall / CPU s | fast wall / CPU s | ratio wall / CPU (per run) "
          "| Gram+eigvalsh floor wall / CPU s (ww / floor, wall) | max abs d alpha (alpha <= 6, n) | spikes equal |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        each = ", ".join(f"{x['ratio']:.2f}" for x in r["runs"])
        print(f"| {r['case']} | {r['layers']} | {r['ww']:.2f} / {r['cww']:.2f} | {r['fast']:.2f} / {r['cfast']:.2f} "
              f"| {r['ratio']:.2f}x / {r['cratio']:.2f}x ({each}) | {r['floor']:.2f} / {r['cfloor']:.2f} "
              f"({r['fratio']:.2f}x) | {r['d_alpha']:.1e} ({r['n_le6']}) | {'yes' if r['spikes'] else 'NO'} |")
    return 0 if all(r["spikes"] and r["d_alpha"] <= 1e-3 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
