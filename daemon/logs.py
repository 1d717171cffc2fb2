"""Read training logs (CSV, JSONL, Hugging Face ``trainer_state.json``) into one shape.

Used by the offline CLI and reusable by the web page. Columns are found by name:
step (``step``, ``iter``, ``iteration``, ``global_step``, ``epoch``), train loss
(``loss``, ``train_loss``, ``training_loss``, Lightning's ``train_loss_step``), validation loss (``val_loss``,
``eval_loss``, ``validation_loss``) and learning rate (``lr``, ``learning_rate``).
An empty cell means "not logged here"; a literal ``nan`` is kept (a non-finite loss is
an event, not a parse error). Every failure is a `LogError` with one clear sentence.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import Iterator

STEP_COLS = ("step", "iter", "iteration", "global_step", "steps", "epoch")
LOSS_COLS = ("loss", "train_loss", "training_loss", "train/loss",
             "train_loss_step", "loss_step", "train/loss_step")  # Lightning's on_step names
VAL_COLS = ("val_loss", "eval_loss", "validation_loss", "valid_loss", "eval/loss", "val/loss")
LR_COLS = ("lr", "learning_rate", "train/learning_rate")
GRAD_COLS = ("grad_norm", "train/grad_norm", "gradient_norm", "grad-norm")
MAX_BYTES = 2 * 1024 ** 3


class LogError(ValueError):
    """A log file that cannot be read as a training log; the message is one sentence."""


@dataclass(frozen=True)
class Record:
    step: int
    loss: float | None = None
    val_loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None


@dataclass(frozen=True)
class TrainingLog:
    """Rows in file order; ``loss_col`` and ``val_col`` say which columns were used."""

    path: str
    records: tuple[Record, ...]
    loss_col: str | None
    val_col: str | None
    lr_col: str | None = None
    step_col: str = "step"
    meta: dict = field(default_factory=dict)
    grad_col: str | None = None

    @property
    def n_loss(self) -> int:
        return sum(r.loss is not None for r in self.records)

    @property
    def n_val(self) -> int:
        return sum(r.val_loss is not None for r in self.records)

    def events(self, eval_as_loss: bool | None = None, with_grad: bool = False) -> Iterator[tuple]:
        """``("loss", step, value, lr)`` and ``("eval", step, value, None)`` in file order;
        ``with_grad``: a fifth item, the gradient norm (None where the log has none).

        With no train loss at all (eval-only logs), eval values are yielded as the loss
        stream (``eval_as_loss`` None means: decide that way automatically).
        """
        if eval_as_loss is None:
            eval_as_loss = self.n_loss == 0
        for r in self.records:
            if r.loss is not None:
                yield ("loss", r.step, r.loss, r.lr, r.grad_norm) if with_grad else ("loss", r.step, r.loss, r.lr)
            if r.val_loss is not None:
                kind = "loss" if eval_as_loss else "eval"
                yield (kind, r.step, r.val_loss, None, None) if with_grad else (kind, r.step, r.val_loss, None)


def _number(text, what: str, where: str) -> float | None:
    if text is None:
        return None
    if isinstance(text, bool):
        raise LogError(f"{where}: {what} value {text!r} is not a number.")
    if isinstance(text, (int, float)):
        return float(text)
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


def _build(path, rows, names, loss_col=None, meta=None) -> TrainingLog:
    step_c = _pick(names, STEP_COLS)
    loss_c = _pick(names, LOSS_COLS, loss_col, "loss column")
    val_c = _pick(names, VAL_COLS)
    lr_c = _pick(names, LR_COLS)
    grad_c = _pick(names, GRAD_COLS)
    if loss_c is None and val_c is None:
        raise LogError(f"{path}: no loss column found (looked for {', '.join(LOSS_COLS + VAL_COLS)}).")
    recs = []
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
        lr = _number(row.get(lr_c), "lr", where) if lr_c else None
        grad = _number(row.get(grad_c), "grad_norm", where) if grad_c else None
        recs.append(Record(int(step), loss, val, lr, grad))
    if not recs:
        raise LogError(f"{path}: no loss values in the file.")
    return TrainingLog(str(path), tuple(recs), loss_c, val_c, lr_c, step_c or "row", meta or {}, grad_c)


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


def read_log(path, loss_col: str | None = None) -> TrainingLog:
    """Read ``path`` (format from its content), choosing columns as the module says;
    TensorBoard event files and W&B/TensorBoard CSV exports through ``log_formats``."""
    from . import log_formats

    if log_formats.is_tfevents(path):
        return log_formats.read_tfevents(path, loss_col)
    text = _read_text(path)
    head = text.lstrip()[:1]
    if head == "{" or head == "[":
        return _read_json(path, text, loss_col)
    return _read_csv(path, text, loss_col)


def _read_csv(path, text, loss_col) -> TrainingLog:
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.DictReader(io.StringIO(text), dialect=dialect)
    names = reader.fieldnames or []
    if len(names) < 1:
        raise LogError(f"{path}: no header row found.")
    from .log_formats import from_export

    names, rows, loss_col = from_export(names, _csv_rows(path, reader), loss_col)
    return _build(path, rows, names, loss_col)


def _csv_rows(path, reader):
    """The rows one at a time: only the parsed records stay in memory, not a dict a row
    (a 12 MiB CSV of 199k rows took 345 MB as dicts; issue 15)."""
    try:
        yield from reader
    except csv.Error as e:
        raise LogError(f"{path}: not a readable CSV file ({e}).") from None


def _read_json(path, text, loss_col) -> TrainingLog:
    try:
        doc = json.loads(text)
        rows = doc.get("log_history") if isinstance(doc, dict) else doc
        meta = {k: v for k, v in doc.items() if k != "log_history"} if isinstance(doc, dict) else {}
        if isinstance(doc, dict) and rows is None:
            rows = [doc]
    except json.JSONDecodeError:
        rows, meta = [], {}
        for i, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise LogError(f"{path}: line {i + 1} is not valid JSON.") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise LogError(f"{path}: expected JSON objects, one per log entry.")
    names = list(dict.fromkeys(k for r in rows for k in r))
    return _build(path, rows, names, loss_col, meta)
