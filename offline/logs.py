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
import os
import re
from contextlib import contextmanager
from itertools import chain, repeat
from json.scanner import make_scanner
from operator import itemgetter

from . import log_columns, log_formats, log_stdout
from .log_table import LogError, TrainingLog, _build, _fast

STOP_KEY = "wtwin_stopped"   # a log_history entry a wtwin callback left on stopping (stops.py)
MAX_BYTES = 2 * 1024 ** 3
_SCAN = make_scanner(json.JSONDecoder())   # json.loads's own scanner, called on a line at 0


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
    """A CSV; else, only when no CSV reading can read it, a trainer's stdout (`log_stdout`:
    Megatron-LM, nanoGPT), so that every log read before reads the same."""
    try:
        return _csv_by_columns(path, text, loss_col) or _csv_by_rows(path, text, loss_col)
    except LogError:
        printed = log_stdout.parse(text)
        if printed is None or not printed[1]:
            raise
    fmt, rows, _ = printed
    return _build(path, rows, log_stdout.NAMES, None, {"format": fmt})


def _csv_by_columns(path, text, loss_col) -> TrainingLog | None:
    """A plain CSV that needs no renaming (`log_formats.from_export`), column by column."""
    plain = log_columns.plain_csv(text)
    if plain is None or log_formats.from_export(plain[0], (), loss_col)[0] != plain[0]:
        return None
    return _fast(path, plain[1], plain[0], loss_col, None, log_columns.text_floats, log_columns.text_steps)


def _csv_by_rows(path, text, loss_col) -> TrainingLog:
    """Any CSV, through the csv module and its sniffer, row by row (`_build`)."""
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
    rows = _csv_rows(path, reader)
    if dialect.delimiter != ",":     # a European spreadsheet's export: 2,3602 is 2.3602
        rows = ({k: _decimal_point(v) for k, v in r.items()} for r in rows)
    names, rows, loss_col = log_formats.from_export(names, rows, loss_col)
    return _build(path, rows, names, loss_col)


_DECIMAL_COMMA = re.compile(r"\s*[-+]?\d+,\d+(?:[eE][-+]?\d+)?\s*")


def _decimal_point(cell):
    """A number written with a decimal comma (in a CSV not separated by commas, where a
    comma can be nothing else), with a point; any other cell as it is."""
    if isinstance(cell, str) and "," in cell and _DECIMAL_COMMA.fullmatch(cell):
        return cell.replace(",", ".")
    return cell


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
