"""WW-PGD experiment: AdamW vs AdamW + WW-PGD on an MLP, paired seeds.

    .venv/bin/python tests/bench/wwpgd_experiment.py [--seeds 5] [--epochs 35]
        [--mnist-dir DIR]   # IDX files (train-images-idx3-ubyte[.gz] ...): MNIST or FashionMNIST
        [--json out.json]

Default data: scikit-learn's bundled digits (1797 8x8 images, flattened to 64 inputs;
a stratified 70/30 split per seed), so it runs offline in a few CPU minutes. Model:
the upstream MLP shape, inputs-512-512-10 with ReLU. Arms, each seed shared by all
(same split, init and batch order): ``adamw``; ``wwpgd-preserve`` (upstream's
retraction, our step); ``wwpgd-enforce`` (ERG enforced). Reports test accuracy
mean +- std over seeds and each layer's alpha (the daemon's fast engine) at a few
epochs, averaged over seeds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch

from wtwin.daemon.spectral import analyze
from wtwin.emitters.wwpgd import WWPGD

ARMS = ("adamw", "wwpgd-preserve", "wwpgd-enforce")


def load_digits_split(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.3, random_state=seed, stratify=d.target)
    return _tensors(xtr, ytr, xte, yte)


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally .gz): the MNIST/FashionMNIST distribution format."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        zero, dtype, ndim = struct.unpack(">HBB", fh.read(4))
        if zero != 0 or dtype != 0x08:
            raise ValueError(f"{path}: not an unsigned-byte IDX file")
        shape = struct.unpack(">" + "I" * ndim, fh.read(4 * ndim))
        return np.frombuffer(fh.read(), dtype=np.uint8).reshape(shape)


def load_idx_dir(directory: str):
    def find(stem):
        for name in (stem, stem + ".gz"):
            if (Path(directory) / name).exists():
                return Path(directory) / name
        raise FileNotFoundError(f"{directory}/{stem}[.gz] not found")

    xtr = read_idx(find("train-images-idx3-ubyte")).reshape(-1, 784) / 255.0
    xte = read_idx(find("t10k-images-idx3-ubyte")).reshape(-1, 784) / 255.0
    ytr, yte = read_idx(find("train-labels-idx1-ubyte")), read_idx(find("t10k-labels-idx1-ubyte"))
    return _tensors(xtr.astype(np.float32), ytr, xte.astype(np.float32), yte)


def _tensors(xtr, ytr, xte, yte):
    return (torch.from_numpy(xtr), torch.from_numpy(np.asarray(ytr, dtype=np.int64)),
            torch.from_numpy(xte), torch.from_numpy(np.asarray(yte, dtype=np.int64)))


def mlp(n_in, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(n_in, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 10))


def layer_alphas(model):
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    return {r.name: r.alpha for r in analyze(sd)}


def report_epochs(epochs):
    return sorted({0, epochs // 4, epochs // 2, 3 * epochs // 4, epochs - 1})


def run(arm, data, seed, epochs, batch, lr):
    xtr, ytr, xte, yte = data
    model = mlp(xtr.shape[1], seed)
    base = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-2)
    opt = base if arm == "adamw" else WWPGD(model, base, q=1.0, eta=0.5, beta=0.5, warmup=0.1, ramp=0.2,
                                              erg=arm.split("-")[1])
    gen = torch.Generator().manual_seed(seed)
    trajectory, measure = {}, report_epochs(epochs)
    for epoch in range(epochs):
        model.train()
        for idx in torch.randperm(len(xtr), generator=gen).split(batch):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
        if isinstance(opt, WWPGD):
            opt.project(epoch, epochs)
        if epoch in measure:
            trajectory[epoch] = layer_alphas(model)
    model.eval()
    with torch.no_grad():
        acc = float((model(xte).argmax(1) == yte).float().mean())
    return acc, trajectory


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=35)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--mnist-dir", help="directory with MNIST/FashionMNIST IDX files (default: sklearn digits)")
    ap.add_argument("--json", help="write all figures here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    fixed = load_idx_dir(args.mnist_dir) if args.mnist_dir else None
    results = {arm: {"acc": [], "traj": []} for arm in ARMS}
    for seed in range(args.seeds):
        data = fixed or load_digits_split(seed)
        for arm in ARMS:
            acc, traj = run(arm, data, seed, args.epochs, args.batch, args.lr)
            results[arm]["acc"].append(acc)
            results[arm]["traj"].append(traj)
            print(f"seed {seed} {arm:15s} acc {100 * acc:.2f}%", flush=True)
    report(results, args, time.time() - t0)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


def report(results, args, elapsed):
    dataset = f"IDX files in {args.mnist_dir}" if args.mnist_dir else "sklearn digits (64 inputs), 70/30 split"
    print(f"\n{dataset}; {args.seeds} paired seeds, {args.epochs} epochs, batch {args.batch}, AdamW lr {args.lr}, "
          f"wd 1e-2; WW-PGD q=1 eta=0.5 beta=0.5 warmup=0.1 ramp=0.2; {elapsed:.0f} s")
    base = results["adamw"]["acc"]
    print("\n| arm | test accuracy % (mean +- std) | paired diff vs adamw (pp, mean +- std) |\n|---|---|---|")
    for arm in ARMS:
        acc = [100 * a for a in results[arm]["acc"]]
        diff = [100 * (a - b) for a, b in zip(results[arm]["acc"], base)]
        print(f"| {arm} | {statistics.mean(acc):.2f} +- {_sd(acc):.2f} | "
              f"{'-' if arm == 'adamw' else f'{statistics.mean(diff):+.2f} +- {_sd(diff):.2f}'} |")
    epochs = report_epochs(args.epochs)
    layers = list(results["adamw"]["traj"][0][0])
    print("\nper-layer alpha (mean over seeds) at epoch ends " + ", ".join(str(e + 1) for e in epochs))
    print("\n| arm | layer | " + " | ".join(f"ep {e + 1}" for e in epochs) + " |\n|---|---|" + "---|" * len(epochs))
    for arm in ARMS:
        for layer in layers:
            vals = [statistics.mean(t[e][layer] for t in results[arm]["traj"]) for e in epochs]
            print(f"| {arm} | {layer} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")


def _sd(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


if __name__ == "__main__":
    sys.exit(main())
