"""Logs of one row an epoch (``epoch,loss,val_loss``, as Keras' CSVLogger writes them),
judged as ``wtwin monitor`` judges them (the epoch read at 100 steps an epoch,
offline/log_table.py's ``whole_steps``): how many healthy ones page, and when the broken
ones do.

    .venv/bin/python tests/bench/epoch_logs.py

Healthy: four schedules (step decay at a third, two thirds and 0.88 of the run; cosine
with a 5-epoch warm-up; a power law; a fine-tune's exponential approach), 3 to 300
epochs, multiplicative noise 0.5-5% of the level, 3 seeds, under the default preset and
``finetuning``. Broken: from 60% of a cosine (100 epochs), a power law (60) and a step
decay (90), both losses climbing 5% of the level an epoch (``ramp``), growing as
exp(t / 3) (``exp``), jumping by half the level and staying (``jump``), a NaN
(``nan``), or the training loss flat from there (``flat``). Printed per broken case: the
first two pages of each seed, as (epochs after the onset, kind, severity).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

from wtwin.offline.cli import main as cli


def judged(path: str, preset: str | None = None) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli(["monitor", path, "--json"] + (["--preset", preset] if preset else []))
    return json.loads(out.getvalue())


def write(path: Path, rows) -> str:
    path.write_text("epoch,loss,val_loss\n" + "".join(
        f"{e},{'nan' if l != l else f'{l:.4f}'},{v:.4f}\n" for e, l, v in rows))
    return str(path)


def step_decay(epochs: int, seed: int, noise: float) -> list:
    rng, rows, level, lr = random.Random(seed), [], 4.0, 0.1
    for e in range(epochs):
        if e in (int(epochs * .33), int(epochs * .66), int(epochs * .88)):
            lr, level = lr * 0.1, level * 0.55
        level -= (level - 0.3) * min(0.3, lr * 2) * (0.5 if e > 2 else 1)
        rows.append((e, level * (1 + rng.gauss(0, noise)), level * 1.15 + 0.2 + rng.gauss(0, 2 * noise)))
    return rows


def cosine(epochs: int, seed: int, noise: float, warm: int = 5) -> list:
    rng, rows, level = random.Random(seed), [], 2.5
    for e in range(epochs):
        lr = (e + 1) / warm if e < warm else 0.5 * (1 + math.cos(math.pi * (e - warm) / (epochs - warm)))
        level -= (level - 0.2) * 0.15 * lr
        rows.append((e, level * (1 + rng.gauss(0, noise)), level * 1.1 + 0.3 + rng.gauss(0, 2 * noise)))
    return rows


def power(epochs: int, seed: int, noise: float) -> list:
    rng = random.Random(seed)
    return [(e, 0.4 + 2 * (1 + e) ** -0.7 * (1 + rng.gauss(0, noise)),
             0.6 + 2 * (1 + e) ** -0.6 + rng.gauss(0, noise)) for e in range(epochs)]


def finetune(epochs: int, seed: int, noise: float) -> list:
    rng = random.Random(seed)
    return [(e, 0.2 + 0.8 * math.exp(-e / 1.5) * (1 + rng.gauss(0, noise)),
             0.35 + 0.5 * math.exp(-e / 2) + rng.gauss(0, noise)) for e in range(epochs)]


HEALTHY = (("step decay", step_decay, (90, 200)), ("cosine", cosine, (50, 100, 300)),
           ("power law", power, (20, 60, 150)), ("fine-tune", finetune, (3, 5, 10)))
BROKEN = (("cosine, 100", lambda s: cosine(100, s, 0.02)), ("power law, 60", lambda s: power(60, s, 0.02)),
          ("step decay, 90", lambda s: step_decay(90, s, 0.02)))
FAULTS = ("ramp", "exp", "jump", "nan", "flat")


def broken(rows: list, fault: str, onset: int) -> list:
    level, out = rows[onset][1], []
    for e, loss, val in rows:
        t = e - onset
        up = {"ramp": 0.05 * level * t, "exp": 0.05 * level * math.expm1(t / 3)}.get(fault, 0.0)
        if t > 0:
            loss, val = loss + up, val + up
        if fault == "jump" and t >= 0:
            loss, val = loss + 0.5 * level, val + 0.5 * level
        if fault == "nan" and t == 0:
            loss = math.nan
        if fault == "flat" and t > 0:
            loss, val = rows[onset][1] * (1 + random.Random(e).gauss(0, 0.02)), rows[onset][2]
        out.append((e, loss, val))
    return out


def main() -> int:
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        paged, total = [], 0
        for name, make, lengths in HEALTHY:
            for epochs in lengths:
                for noise in (0.005, 0.02, 0.05):
                    for seed in range(3):
                        path = write(Path(tmp) / "run.csv", make(epochs, seed, noise))
                        for preset in (None, "finetuning"):
                            total += 1
                            got = [(a["step"], a["kind"], a["severity"]) for a in judged(path, preset)["alerts"]]
                            if got:
                                paged.append((name, epochs, noise, seed, preset, got[:2]))
        print(f"healthy per-epoch logs that page: {len(paged)} of {total}")
        for row in paged:
            print("  ", *row)
        print(f"\n{'broken':16s} {'fault':6s} first pages of 3 seeds (epochs after the onset, kind, severity)")
        for name, make in BROKEN:
            for fault in FAULTS:
                seeds = []
                for seed in range(3):
                    rows = make(seed)
                    onset = int(0.6 * len(rows))
                    res = judged(write(Path(tmp) / "run.csv", broken(rows, fault, onset)))
                    seeds.append([(a["step"] // res["step_scale"]["times"] - onset, a["kind"], a["severity"])
                                  for a in res["alerts"]][:2])
                print(f"{name:16s} {fault:6s} {seeds}")
    print(f"\n{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
