"""The shape of a training log, and how rows become one: the column names looked for,
`TrainingLog`, `LogError`, and the row-by-row builder (`_build`) that every reader
(`logs.py` for CSV and JSON, `log_formats.py` for TensorBoard and exports) ends in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from operator import eq, lt
from typing import Iterator

from . import log_columns
from .log_columns import Records

STEP_COLS = ("step", "iter", "iteration", "global_step", "steps", "epoch")
STEP_DECIMALS = 6   # a fractional step column is scaled to whole steps by at most 10**6
EPOCH_COLS = ("epoch",)   # beside a step column that may count within each epoch, or as it
EPOCH_STEPS = 100          # an epoch column is read at this many steps an epoch, or finer
# the words that make a column naming a loss a held-out one, or no loss at all
HELD_OUT = {"val", "valid", "validation", "eval", "evaluation", "test", "dev", "holdout"}
NOT_A_LOSS = {"scale", "scaler", "weight", "weights", "coef", "coeff", "factor"}
LOSS_COLS = ("loss", "train_loss", "training_loss", "train/loss",
             "train_loss_step", "loss_step", "train/loss_step")  # Lightning's on_step names
VAL_COLS = ("val_loss", "eval_loss", "validation_loss", "valid_loss", "eval/loss", "val/loss")
LR_COLS = ("lr", "learning_rate", "train/learning_rate")
GRAD_COLS = ("grad_norm", "train/grad_norm", "gradient_norm", "grad-norm")


class LogError(ValueError):
    """A log file that cannot be read as a training log; the message is one sentence."""


@dataclass(frozen=True)
class TrainingLog:
    """Rows in file order; ``loss_col`` and ``val_col`` say which columns were used."""

    path: str
    records: Records
    loss_col: str | None
    val_col: str | None
    lr_col: str | None = None
    step_col: str = "step"
    meta: dict = field(default_factory=dict)
    grad_col: str | None = None
    # how the steps came from ``step_col`` (`whole_steps`): 1 as written, 10**k the
    # column (fractional: an epoch) times that, 0 the rows' numbers
    step_scale: int = 1
    # the step column counted within each epoch, and counts on across them here
    # (`steps_across_epochs`)
    steps_in_epoch: bool = False

    @property
    def n_loss(self) -> int:
        return self.records.n_loss

    @property
    def n_val(self) -> int:
        return self.records.n_val

    def events(self, eval_as_loss: bool | None = None, with_grad: bool = False) -> Iterator[tuple]:
        """``("loss", step, value, lr)`` and ``("eval", step, value, None)`` in file order;
        ``with_grad``: a fifth item, the gradient norm (None where the log has none).

        With no train loss at all (eval-only logs), eval values are yielded as the loss
        stream (``eval_as_loss`` None means: decide that way automatically).
        """
        if eval_as_loss is None:
            eval_as_loss = self.n_loss == 0
        kind = "loss" if eval_as_loss else "eval"
        steps, losses, vals, lrs, grads = self.records.columns()
        if self.n_loss == len(losses):     # the common shape: a loss on every row
            return log_columns.row_events(kind, with_grad, steps, losses, vals, lrs, grads)
        if not self.n_val:
            if with_grad:
                return (("loss", s, v, lr, g) for s, v, lr, g in zip(steps, losses, lrs, grads) if v is not None)
            return (("loss", s, v, lr) for s, v, lr in zip(steps, losses, lrs) if v is not None)
        return _mixed(kind, with_grad, steps, losses, vals, lrs, grads)


def _mixed(kind, with_grad, steps, losses, vals, lrs, grads) -> Iterator[tuple]:
    for s, v, val, lr, g in zip(steps, losses, vals, lrs, grads):
        if v is not None:
            yield ("loss", s, v, lr, g) if with_grad else ("loss", s, v, lr)
        if val is not None:
            yield (kind, s, val, None, None) if with_grad else (kind, s, val, None)


def _number(text, what: str, where: str) -> float | None:
    if text is None:
        return None
    if isinstance(text, bool):
        raise LogError(f"{where}: {what} value {text!r} is not a number.")
    if isinstance(text, (int, float)):
        try:
            return float(text)
        except OverflowError:
            raise LogError(f"{where}: {what} value {str(text)[:40]}... is too large.") from None
    s = str(text).strip()
    if s == "":
        return None
    try:
        return float(s)
    except ValueError:
        raise LogError(f"{where}: {what} value {s[:40]!r} is not a number.") from None


def _pick(names, wanted, explicit=None, what="column"):
    low = {n.strip().lower(): n for n in names if n is not None}
    if explicit is not None:
        if explicit in names:
            return explicit
        if explicit.lower() in low:
            return low[explicit.lower()]
        raise LogError(f"there is no {what} named {explicit!r} (columns: {', '.join(map(str, names))}).")
    for w in wanted:
        if w in low:
            return low[w]
    return None


def _tokens(name: str) -> set[str]:
    """The words of a column name: ``val_lossScale`` -> {"val", "loss", "scale"}."""
    return set(re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", str(name)).lower()))


def _named_loss(path, names) -> tuple:
    """(train loss, val loss) of a log none of whose columns has a usual name: the one
    column whose name holds the word "loss" (``total_loss``, ``lm loss``), and the one
    that also says val/eval/test; never a loss scale or weight. Several of a kind: the
    error names them, for ``--loss-col``."""
    found = [n for n in names if n is not None and "loss" in _tokens(n)
             and not _tokens(n) & NOT_A_LOSS]
    train = [n for n in found if not _tokens(n) & HELD_OUT]
    held = [n for n in found if _tokens(n) & HELD_OUT]
    if len(train) > 1 or (not train and len(held) > 1):
        raise LogError(f"{path}: no column has a usual loss name, and several name a loss "
                       f"({', '.join(map(str, train or held))}): name one with --loss-col.")
    return (train[0] if train else None), (held[0] if len(held) == 1 else None)


def _choose(path, names, loss_col=None) -> tuple:
    """(step, loss, val_loss, lr, grad_norm, epoch) column names, None where absent (the
    epoch: unless it is the step column itself)."""
    step_c = _pick(names, STEP_COLS)
    loss_c = _pick(names, LOSS_COLS, loss_col, "loss column")
    val_c = _pick(names, VAL_COLS)
    lr_c = _pick(names, LR_COLS)
    grad_c = _pick(names, GRAD_COLS)
    if loss_c is None and val_c is None and loss_col is None:
        loss_c, val_c = _named_loss(path, names)
    if loss_c is None and val_c is None:
        raise LogError(f"{path}: no loss column found (looked for {', '.join(LOSS_COLS + VAL_COLS)}).")
    epoch_c = _pick(names, EPOCH_COLS)
    if epoch_c == step_c:
        epoch_c = None
    return step_c, loss_c, val_c, lr_c, grad_c, epoch_c


def _log(path, cols: tuple, chosen: tuple, meta) -> TrainingLog:
    step_c, loss_c, val_c, lr_c, grad_c, _ = chosen
    *cols, epochs = cols
    in_epoch = steps_across_epochs(cols[0], epochs)
    scale = whole_steps(cols[0], (step_c or "").strip().lower() in EPOCH_COLS)
    return TrainingLog(str(path), Records(*cols), loss_c, val_c, lr_c, step_c or "row", meta or {},
                       grad_c, scale, in_epoch)


def steps_across_epochs(steps: list, epochs: list) -> bool:
    """A step column that counts within each epoch (a logger's batch index: 0-99, then
    0-99 again) made to count on across them, in place; True when it did. It does when
    the step goes back at least once and, at every row where it goes back, the epoch
    column has grown: a resume goes back without a new epoch, and keeps its steps. Read
    as they were, every epoch was a resume: the detectors started over each time and, in
    a log of 100 points an epoch, never left their warm-ups. An epoch that comes back (a
    resume into an earlier one) counts from where it counted before, so the steps go
    back with it."""
    if epochs.count(None) == len(epochs) or not any(map(lt, steps[1:], steps)):
        return False                           # no epoch column, or no step goes back
    back = [i for i in range(1, len(steps)) if steps[i] < steps[i - 1]]
    if not all(epochs[i] is not None and epochs[i - 1] is not None
               and epochs[i] > epochs[i - 1] for i in back):
        return False
    start = {epochs[0]: 0}       # epoch -> what its steps are counted on from
    prev = steps[0]
    for i in range(1, len(steps)):
        e, s = epochs[i], steps[i]
        if e not in start:       # a new epoch counts on from the last step; an epoch seen
            start[e] = prev + 1 - s if s <= prev else 0    # before (a resume) from its own
        steps[i] = prev = s + start[e]
    return True


def whole_steps(steps: list, epochs: bool = False) -> int:
    """Make a step column whole numbers on the detectors' scale, in place, and return how:
    ``10**k``, the steps are the column times that; 0, the rows' numbers; 1, as written.

    - A column with fractional values (an ``epoch`` of 0.01, 0.02, ...): times the power of
      ten, the fewest decimals up to `STEP_DECIMALS`, that makes every value whole; values
      none makes whole (a time in seconds): the rows' numbers. Cut to ints, 100 points an
      epoch shared one step: the detectors judged one of them, and their warm-ups, in
      steps, never ended.
    - ``epochs``, the column counts epochs: at least `EPOCH_STEPS` steps an epoch. The
      detectors' time scales are steps (a warm-up of 300, a level's half-life of 100): a
      log of one point an epoch (Keras' CSVLogger) spanned 99 "steps" in 100 epochs, and
      a loss that ran away from epoch 60 was paged only as an overfit. An epoch column
      that repeats a whole value over rows (a point a batch): the rows' numbers."""
    if all(type(v) is int for v in steps):
        if not epochs:
            return 1
        if any(map(eq, steps[1:], steps)):
            steps[:] = range(1, len(steps) + 1)
            return 0
        steps[:] = [v * EPOCH_STEPS for v in steps]
        return EPOCH_STEPS
    for k in range(2 if epochs else 1, STEP_DECIMALS + 1):
        scaled = [v * 10 ** k for v in steps]
        whole = [round(x) for x in scaled]
        if all(abs(x - w) <= max(1e-6, 1e-12 * abs(x)) for x, w in zip(scaled, whole)):
            steps[:] = whole
            return 10 ** k
    steps[:] = range(1, len(steps) + 1)
    return 0


def _build(path, rows, names, loss_col=None, meta=None) -> TrainingLog:
    """The row-by-row reader: every file the fast path (`log_columns`) leaves to it, and
    the reference for what that path must give."""
    chosen = _choose(path, names, loss_col)
    step_c, loss_c, val_c, lr_c, grad_c, epoch_c = chosen
    cols = steps, losses, vals, lrs, grads, epochs = [], [], [], [], [], []
    for i, row in enumerate(rows):
        where = f"{path}, row {i + 1}"
        loss = _number(row.get(loss_c), "loss", where) if loss_c else None
        val = _number(row.get(val_c), "val_loss", where) if val_c else None
        if loss is None and val is None:
            continue
        st = _number(row.get(step_c), "step", where) if step_c else None
        step = i if st is None else st
        if not math.isfinite(step):
            raise LogError(f"{where}: step value {step!r} is not finite.")
        lrs.append(_number(row.get(lr_c), "lr", where) if lr_c else None)
        grads.append(_number(row.get(grad_c), "grad_norm", where) if grad_c else None)
        steps.append(int(step) if step == int(step) else step)
        epochs.append(_number(row.get(epoch_c), "epoch", where) if epoch_c else None)
        losses.append(loss)
        vals.append(val)
    if not steps:
        raise LogError(f"{path}: no loss values in the file.")
    return _log(path, cols, chosen, meta)


def _fast(path, blocks, names, loss_col, meta, floats, steps) -> TrainingLog | None:
    """The log read a column at a time (`log_columns`), or None where only the row
    reader can say what the file holds."""
    chosen = _choose(path, names, loss_col)
    try:
        return _log(path, log_columns.columns(blocks, chosen, floats, steps), chosen, meta)
    except log_columns.Slow:
        return None
