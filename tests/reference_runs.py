"""Own pairs of runs for the reference detector (issue 26): real torch training on
scikit-learn's bundled ``load_digits`` (no download), CPU, seconds a run.

An MLP (64-64-10) trained with Adam, 1,400 training digits, batches of 32, ``STEPS``
steps, lr ``LR`` with a 50-step linear warm-up and a cosine decay to a tenth. Each run
is one ``change`` against the baseline:

- ``base``: the baseline (runs that differ only by seed);
- ``bf16`` / ``fp16``: the forward pass under CPU autocast (torch.autocast("cpu"));
- ``lr_half``: the lr schedule at half its height;
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

import csv
import math
import os
import sys
from pathlib import Path

STEPS, LR, WARMUP, BATCH = 2000, 2e-3, 50, 32
RESUME, REWIND = 1000, 300
CHANGES = ("base", "bf16", "fp16", "lr_half", "label_noise", "resumed")
ONSET = {"resumed": RESUME}   # where a change starts (the others: step 1)
BASE_SEEDS = tuple(range(21))          # 21 runs: 20 consecutive seed-only pairs
CHANGE_SEEDS = tuple(range(100, 105))  # 5 runs a change, each against a base of another seed


def cache_dir() -> Path:
    d = os.environ.get("WTWIN_REFERENCE_RUNS") or Path.home() / ".cache" / "wtwin" / "reference_runs"
    return Path(d)


def lr_at(step: int, change: str = "base") -> float:
    """The schedule: linear warm-up over ``WARMUP`` steps, cosine to LR/10 at STEPS."""
    peak = LR / 2 if change == "lr_half" else LR
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

    if change not in CHANGES:
        raise ValueError(f"change must be one of {CHANGES}, got {change!r}")
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
            loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
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


def main() -> int:
    for label, live, ref in pairs():
        rows = load(*live)
        load(*ref)
        print(f"{label:12s} {live[0]}_s{live[1]:<4d} vs {ref[0]}_s{ref[1]:<4d} final loss "
              f"{sum(r[1] for r in rows[-100:]) / 100:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
