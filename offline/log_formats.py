"""Logs as other tools write them, turned into the columns ``logs.py`` reads.

- W&B chart CSV export: ``"Step","<run> - train/loss","<run> - train/loss__MIN",
  "<run> - train/loss__MAX"``: one run's metric columns, ``<run> - `` dropped and the
  ``__MIN``/``__MAX`` envelope ignored (the first run, or the one ``--loss-col`` names).
- TensorBoard scalar CSV export: ``Wall time,Step,Value``: ``Value`` is the loss.
- Lightning ``CSVLogger`` ``metrics.csv``: ``train_loss_step`` is in ``log_table.LOSS_COLS``.
- TensorBoard event files (a ``*tfevents*`` file or a folder holding them), read with
  tensorboard's own ``EventAccumulator`` (extra ``wtwin[tensorboard]``); the scalar tag
  is ``--loss-col`` or the first of the usual names; lr and grad norm by their usual tags.
"""

from __future__ import annotations

import os
import re

from .log_table import GRAD_COLS, LOSS_COLS, LR_COLS, VAL_COLS, LogError, TrainingLog, _build

TB_CSV = ["Wall time", "Step", "Value"]
_WANDB = re.compile(r"^(?P<run>.+?) - (?P<metric>.+)$")
# what TensorBoard users call their scalars, beyond the CSV names
TB_LOSS = LOSS_COLS + ("loss/train", "train/loss_step", "training/loss", "train_loss_step")
TB_VAL = VAL_COLS + ("loss/val", "loss/valid", "loss/eval", "loss/validation", "validation/loss")
TB_LR = LR_COLS + ("train/lr", "lr-adamw", "lr-adam", "lr-sgd", "learning-rate")
TB_GRAD = GRAD_COLS + ("grad_norm/train", "train/grad-norm", "grad-norm/total")


def from_export(names: list[str], rows: list[dict], loss_col: str | None):
    """(names, rows, loss_col) with a W&B or TensorBoard CSV export's columns renamed;
    any other CSV unchanged."""
    if [n.strip() for n in names] == TB_CSV:
        rows = ({"step": r.get("Step"), "loss": r.get("Value")} for r in rows)
        return ["step", "loss"], rows, None if loss_col in (None, "Value") else loss_col
    others = [n for n in names if n.strip().lower() != "step"]
    if len(others) == len(names) or not others or not all(_WANDB.match(n) for n in others):
        return names, rows, loss_col  # a W&B export is Step and "<run> - <metric>" only
    runs = [m for n in others if not (m := _WANDB.match(n))["metric"].endswith(("__MIN", "__MAX"))]
    run = _wandb_run(runs, loss_col)
    keep = {m.string: m["metric"] for m in runs if m["run"] == run}
    if loss_col is not None and loss_col in keep:
        loss_col = keep[loss_col]
    step = next(n for n in names if n.strip().lower() == "step")
    rows = ({"step": r.get(step), **{new: r.get(old) for old, new in keep.items()}} for r in rows)
    return ["step", *keep.values()], rows, loss_col


def _wandb_run(runs: list[re.Match], loss_col: str | None) -> str:
    for m in runs:  # --loss-col names a column ("<run> - train/loss") or a metric ("train/loss")
        if loss_col is not None and loss_col in (m.string, m["metric"]):
            return m["run"]
    return runs[0]["run"]


def is_tfevents(path) -> bool:
    path = os.fspath(path)
    if os.path.isdir(path):
        return any("tfevents" in f for _, _, files in os.walk(path) for f in files)
    return "tfevents" in os.path.basename(path)


def read_tfevents(path, loss_col: str | None = None, run: str | None = None) -> TrainingLog:
    """The scalars of an event file (or of the event files of one run under a logdir),
    one row a step. ``run``: the run's name in a logdir of several (TensorBoard's layout)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ModuleNotFoundError:
        raise LogError(f"{path}: reading TensorBoard event files needs the tensorboard package: "
                       "pip install 'wtwin[tensorboard]'.") from None
    if not os.path.exists(path):
        raise LogError(f"{path}: no such file or folder.")
    acc = EventAccumulator(_run_folder(os.fspath(path), run), size_guidance={"scalars": 0})
    try:
        acc.Reload()
    except Exception as e:  # a corrupt or truncated file: tensorboard raises several types
        raise LogError(f"{path}: not a readable TensorBoard event file ({type(e).__name__}).") from None
    tags = acc.Tags().get("scalars", [])
    if not tags:
        raise LogError(f"{path}: no scalars in the TensorBoard event file(s).")
    chosen = _tags(path, tags, loss_col)
    by_step: dict[int, dict] = {}
    for col, tag in chosen.items():
        for ev in acc.Scalars(tag):
            by_step.setdefault(int(ev.step), {"step": int(ev.step)})[col] = float(ev.value)
    rows = [by_step[s] for s in sorted(by_step)]
    return _build(path, rows, ["step", *chosen], None, {"tfevents_tags": dict(chosen)})


def run_names(path: str) -> list[str]:
    """TensorBoard's run names under a logdir: each folder holding event files, relative
    to ``path`` (``.`` for event files directly in it)."""
    return sorted({os.path.relpath(d, path) for d, _, files in os.walk(path)
                   if any("tfevents" in f for f in files)})


def _run_folder(path: str, run: str | None = None) -> str:
    """A file; or the folder of the one run under ``path`` (a logdir of one run, as
    Lightning's ``lightning_logs/version_0/``); or, in a logdir of several runs
    (TensorBoard's layout), the run named ``run``. Without one, the error lists them."""
    if not os.path.isdir(path):
        if run is not None:
            raise LogError(f"{path}: --run names a run in a logdir folder; this is one file.")
        return path
    names = run_names(path)
    if run is not None:
        wanted = os.path.normpath(run)
        if wanted not in names:
            raise LogError(f"{path}: no run named {run!r}; the runs here are: {_listed(names)}.")
        return os.path.join(path, wanted)
    if len(names) > 1:
        raise LogError(f"{path}: a logdir of {len(names)} runs ({_listed(names)}); "
                       f"name one with --run, e.g. --run {names[0]}")
    return os.path.join(path, names[0])


def _listed(names: list[str], most: int = 20) -> str:
    return ", ".join(names[:most]) + (f", and {len(names) - most} more" if len(names) > most else "")


def _tags(path, tags: list[str], loss_col: str | None) -> dict[str, str]:
    """{"loss"/"val_loss"/"lr"/"grad_norm": tag}; ``loss_col`` must name a tag when given."""
    low = {t.lower(): t for t in tags}
    if loss_col is not None and loss_col not in tags and loss_col.lower() not in low:
        raise LogError(f"{path}: there is no scalar tag named {loss_col!r} (tags: {', '.join(tags)}).")
    out = {}
    for col, wanted in (("loss", TB_LOSS), ("val_loss", TB_VAL), ("lr", TB_LR), ("grad_norm", TB_GRAD)):
        if col == "loss" and loss_col is not None:
            out[col] = low.get(loss_col.lower(), loss_col)
            continue
        tag = next((low[w] for w in wanted if w in low), None)
        if tag is not None:
            out[col] = tag
    if "loss" not in out and "val_loss" not in out:
        raise LogError(f"{path}: no loss scalar found (tags: {', '.join(tags)}); "
                       "name one with --loss-col.")
    return out
