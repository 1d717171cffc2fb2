"""Read training logs (CSV, JSONL, Hugging Face ``trainer_state.json``) into one shape.

Used by the offline CLI and reusable by the web page. Columns are found by name:
step (``step``, ``iter``, ``iteration``, ``global_step``, ``epoch``), train loss
(``loss``, ``train_loss``, ``training_loss``, Lightning's ``train_loss_step``), validation loss (``val_loss``,
``eval_loss``, ``validation_loss``) and learning rate (``lr``, ``learning_rate``).
An empty cell means "not logged here"; a literal ``nan`` is kept (a non-finite loss is
an event, not a parse error). Every failure is a `LogError` with one clear sentence.

Rows are kept as columns (`Records`). A plain CSV and JSON rows of numbers are read a
column at a time (`log_columns`, several times faster than row by row);
whatever that path cannot read exactly as `_build` would goes through `_build`, row by
row, so both give the same records and the same errors.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain, repeat
from json.scanner import make_scanner
from operator import itemgetter
from typing import Iterator

from . import log_columns
from .log_columns import Record, Records

STOP_KEY = "wtwin_stopped"   # a log_history entry a wtwin callback left on stopping (stops.py)
STEP_COLS = ("step", "iter", "iteration", "global_step", "steps", "epoch")
LOSS_COLS = ("loss", "train_loss", "training_loss", "train/loss",
             "train_loss_step", "loss_step", "train/loss_step")  # Lightning's on_step names
VAL_COLS = ("val_loss", "eval_loss", "validation_loss", "valid_loss", "eval/loss", "val/loss")
LR_COLS = ("lr", "learning_rate", "train/learning_rate")
GRAD_COLS = ("grad_norm", "train/grad_norm", "gradient_norm", "grad-norm")
MAX_BYTES = 2 * 1024 ** 3
_SCAN = make_scanner(json.JSONDecoder())   # json.loads's own scanner, called on a line at 0


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


def _choose(path, names, loss_col=None) -> tuple:
    """(step, loss, val_loss, lr, grad_norm) column names, None where absent."""
    step_c = _pick(names, STEP_COLS)
    loss_c = _pick(names, LOSS_COLS, loss_col, "loss column")
    val_c = _pick(names, VAL_COLS)
    lr_c = _pick(names, LR_COLS)
    grad_c = _pick(names, GRAD_COLS)
    if loss_c is None and val_c is None:
        raise LogError(f"{path}: no loss column found (looked for {', '.join(LOSS_COLS + VAL_COLS)}).")
    return step_c, loss_c, val_c, lr_c, grad_c


def _log(path, cols: tuple, chosen: tuple, meta) -> TrainingLog:
    step_c, loss_c, val_c, lr_c, grad_c = chosen
    return TrainingLog(str(path), Records(*cols), loss_c, val_c, lr_c, step_c or "row", meta or {}, grad_c)


def _build(path, rows, names, loss_col=None, meta=None) -> TrainingLog:
    """The row-by-row reader: every file the fast path (`log_columns`) leaves to it, and
    the reference for what that path must give."""
    chosen = _choose(path, names, loss_col)
    step_c, loss_c, val_c, lr_c, grad_c = chosen
    cols = steps, losses, vals, lrs, grads = [], [], [], [], []
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
        steps.append(int(step))
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


def _read_text(path) -> str:
    try:
        size = os.path.getsize(path)
        if size == 0:
            raise LogError(f"{path}: the file is empty.")
        if size > MAX_BYTES:
            raise LogError(f"{path}: the file is larger than 2 GiB.")
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise LogError(f"{path}: cannot read the file ({e.strerror or e}).") from None
    if b"\x00" in raw[:65536]:
        raise LogError(f"{path}: this is a binary file, not a CSV, JSONL or JSON log.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise LogError(f"{path}: the file is not UTF-8 text.") from None
    if not text.strip():
        raise LogError(f"{path}: the file is empty.")
    return text


def read_log(path, loss_col: str | None = None, run: str | None = None) -> TrainingLog:
    """Read ``path`` (format from its content), choosing columns as the module says;
    TensorBoard event files and W&B/TensorBoard CSV exports through ``log_formats``.
    ``run``: in a TensorBoard logdir of several runs, the one to read (its name)."""
    from . import log_formats

    if log_formats.is_tfevents(path):
        return log_formats.read_tfevents(path, loss_col, run)
    if run is not None:
        raise LogError(f"{path}: --run picks a run in a TensorBoard logdir; this is not one.")
    text = _read_text(path)
    head = text.lstrip()[:1]
    if head == "{" or head == "[":
        return _read_json(path, text, loss_col)
    return _read_csv(path, text, loss_col)


def _read_csv(path, text, loss_col) -> TrainingLog:
    return _csv_by_columns(path, text, loss_col) or _csv_by_rows(path, text, loss_col)


def _csv_by_columns(path, text, loss_col) -> TrainingLog | None:
    """A plain CSV that needs no renaming (`log_formats.from_export`), column by column."""
    from . import log_formats

    plain = log_columns.plain_csv(text)
    if plain is None or log_formats.from_export(plain[0], (), loss_col)[0] != plain[0]:
        return None
    return _fast(path, plain[1], plain[0], loss_col, None, log_columns.text_floats, log_columns.text_steps)


def _csv_by_rows(path, text, loss_col) -> TrainingLog:
    """Any CSV, through the csv module and its sniffer, row by row (`_build`)."""
    from . import log_formats

    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.DictReader(io.StringIO(text), dialect=dialect)
    try:
        names = reader.fieldnames or []
    except csv.Error as e:
        raise LogError(f"{path}: not a readable CSV file ({e}).") from None
    if len(names) < 1:
        raise LogError(f"{path}: no header row found.")
    names, rows, loss_col = log_formats.from_export(names, _csv_rows(path, reader), loss_col)
    return _build(path, rows, names, loss_col)


def _csv_rows(path, reader):
    """The rows one at a time: only the parsed records stay in memory, not a dict a row
    (dicts would take many times the file's size)."""
    try:
        yield from reader
    except csv.Error as e:
        raise LogError(f"{path}: not a readable CSV file ({e}).") from None


def _read_json(path, text, loss_col) -> TrainingLog:
    with _paused_gc():
        return _read_json_rows(path, text, loss_col)


@contextmanager
def _paused_gc():
    """No cyclic GC while a million acyclic dicts are built (its passes over the growing
    heap doubled the time of a 10^6-line JSONL). Process-wide, for the parse only: in the
    daemon (an uploaded log, read on a worker thread) collection resumes after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_json_rows(path, text, loss_col) -> TrainingLog:
    try:
        doc = json.loads(text)
        rows = doc.get("log_history") if isinstance(doc, dict) else doc
        meta = {k: v for k, v in doc.items() if k != "log_history"} if isinstance(doc, dict) else {}
        if isinstance(rows, list) and any(isinstance(r, dict) and STOP_KEY in r for r in rows):
            # what a wtwin callback logged when it stopped training (offline/stops.py)
            meta[STOP_KEY] = [r[STOP_KEY] for r in rows if isinstance(r, dict) and STOP_KEY in r]
            rows = [r for r in rows if not (isinstance(r, dict) and STOP_KEY in r)]
        if isinstance(doc, dict) and rows is None:
            rows = [doc]
    except json.JSONDecodeError:
        rows, meta = _json_lines(path, text.splitlines()), {}
    if not isinstance(rows, list) or not set(map(type, rows)) <= {dict}:
        raise LogError(f"{path}: expected JSON objects, one per log entry.")
    names = list(dict.fromkeys(chain.from_iterable(rows)))
    blocks = log_columns.json_blocks(rows)
    return (_fast(path, blocks, names, loss_col, meta, log_columns.json_floats, log_columns.json_steps)
            or _build(path, rows, names, loss_col, meta))


def _json_lines(path, lines: list[str]) -> list:
    """One JSON value a non-blank line, as ``json.loads`` reads each; the first line that
    is not says so. Lines with nothing around their value go through json's C scanner
    in one pass (half of ``json.loads``'s time a line)."""
    try:
        parsed = list(map(_SCAN, lines, repeat(0)))
        if list(map(itemgetter(1), parsed)) == list(map(len, lines)):
            return list(map(itemgetter(0), parsed))
    except (StopIteration, ValueError):      # a blank or padded line, or not JSON: line by line
        pass
    try:
        return [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError:
        pass
    for i, line in enumerate(lines):
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError:
                raise LogError(f"{path}: line {i + 1} is not valid JSON.") from None
    raise AssertionError("unreachable: a line failed to parse once")
