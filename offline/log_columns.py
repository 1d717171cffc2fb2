"""The fast path of ``logs.py``: a log read a column at a time, not a row at a time,
and kept as columns (`Records`; a `Record` is one row, built when asked for).

``logs._build`` reads row by row (a dict, five ``_number`` calls and a check a row). Here
the common shapes take a few C-level passes a column:

- a CSV as loggers write it (`plain_csv`): a plain header, ``,`` between fields, no
  quotes, the same number of fields on every row, ``\\n`` or ``\\r\\n`` line ends;
- JSON rows (`json_blocks`) whose values are numbers or null.

Whatever it cannot give exactly as the row-by-row reader would (a cell that is not a
plain number, a quote, a ragged row, a non-finite step, a step that would round) raises
`Slow`, and the row-by-row reader reads the file instead: the same records, or the same
error. This module changes how fast a log is read, never what is read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import is_not, methodcaller
from typing import Callable, Iterator

FIELD_LIMIT = 131_072   # csv.field_size_limit()'s default: a longer field is the csv module's error
SNIFF = 4096            # what logs._read_csv shows csv.Sniffer
EXACT_INT = 2 ** 53     # a step beyond this is rounded by the row reader's float()
NUMBERS = {float, int}  # JSON numbers (a bool is neither: the row reader refuses it)

BLOCK = 1 << 20          # characters of CSV text parsed at once

Cells = Callable[[str], list]
Block = tuple[int, int, Cells]


@dataclass(frozen=True)
class Record:
    step: int
    loss: float | None = None
    val_loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None


class Records(Sequence):
    """The rows of a log, kept as one list per field (``step``, ``loss``, ``val_loss``,
    ``lr``, ``grad_norm``; None where a row has no value): a million rows cost five
    lists, not a million objects. Indexing gives a `Record`."""

    __slots__ = ("step", "loss", "val_loss", "lr", "grad_norm", "n_loss", "n_val")

    def __init__(self, step: list, loss: list, val_loss: list, lr: list, grad_norm: list) -> None:
        self.step, self.loss, self.val_loss, self.lr, self.grad_norm = step, loss, val_loss, lr, grad_norm
        self.n_loss = len(loss) - loss.count(None)
        self.n_val = len(val_loss) - val_loss.count(None)

    def __len__(self) -> int:
        return len(self.step)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Record(self.step[i], self.loss[i], self.val_loss[i], self.lr[i], self.grad_norm[i])

    def __iter__(self) -> Iterator[Record]:
        return map(Record, self.step, self.loss, self.val_loss, self.lr, self.grad_norm)

    def __eq__(self, other) -> bool:
        return isinstance(other, Records) and self.columns() == other.columns()

    def __repr__(self) -> str:
        return f"Records({len(self)} rows)"

    def columns(self) -> tuple[list, ...]:
        return self.step, self.loss, self.val_loss, self.lr, self.grad_norm


class Slow(Exception):
    """The fast path cannot promise the row-by-row reader's result: use that reader."""


def plain_csv(text: str) -> tuple[list[str], Iterator[Block]] | None:
    """(names, blocks) of a plain CSV; None when the csv module must read it (its sniffer
    could pick another delimiter or a quote character). A block is ``(index of its
    first row, rows, cells)``, ``cells(name)`` that column's strings; a block that is not
    plain raises `Slow`. Blocks of about `BLOCK` characters keep the memory small."""
    sample = text[:SNIFF]
    if '"' in text or "'" in sample or ";" in sample or "\t" in sample:
        return None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            return None
    head = text.find("\n")
    names = text[:head].split(",")
    if (head < 0 or head > FIELD_LIMIT or len(set(names)) != len(names)
            or any(not n or n != n.strip() for n in names)):
        return None
    return names, _blocks(text, head + 1, names)


def _blocks(text: str, pos: int, names: list[str]) -> Iterator[Block]:
    k, first = len(names), 0
    while pos < len(text):
        end = text.find("\n", pos + BLOCK)
        end = len(text) if end < 0 else end + 1
        rows = text[pos:end].split("\n")
        pos = end
        if not rows[-1]:
            rows.pop()
        if "" in rows:                           # blank lines: the csv module skips them
            rows = [r for r in rows if r]
        if not rows:
            continue
        if max(map(len, rows)) > FIELD_LIMIT or set(map(methodcaller("count", ","), rows)) != {k - 1}:
            raise Slow
        flat = ",".join(rows).split(",") if k > 1 else rows
        yield first, len(rows), (lambda name, flat=flat: flat[names.index(name)::k])
        first += len(rows)


def json_blocks(rows: list[dict]) -> list[Block]:
    return [(0, len(rows), lambda name: list(map(dict.get, rows, repeat(name))))]


def text_floats(cells: list[str]) -> list:
    """Floats, None for an empty cell; `Slow` for anything else float() refuses."""
    try:
        if "" in cells:
            return [float(x) if x else None for x in cells]
        return list(map(float, cells))
    except ValueError:
        raise Slow from None


def text_steps(cells: list[str], first: int) -> list[int]:
    try:
        ints = list(map(int, cells))
    except ValueError:
        return _int_steps(text_floats(cells), first)
    if -EXACT_INT <= min(ints) and max(ints) <= EXACT_INT:
        return ints
    return _int_steps(text_floats(cells), first)


def json_floats(values: list) -> list:
    """Floats, None for null; `Slow` for a string, a bool or an int too large."""
    kinds = set(map(type, values))
    try:
        if kinds <= NUMBERS:
            return list(map(float, values))
        if kinds <= NUMBERS | {type(None)}:
            return [None if v is None else float(v) for v in values]
    except OverflowError:
        pass
    raise Slow


def json_steps(values: list, first: int) -> list[int]:
    return _int_steps(json_floats(values), first)


def _int_steps(values: list, first: int) -> list:
    """The steps as the row reader takes them: ints, or the floats themselves where one is
    fractional (an epoch column: `log_table.whole_steps` numbers them); an empty step is
    the row's index; a step that is not finite is the row reader's error (or not, on a
    row it skips)."""
    if None in values:
        values = [i if v is None else v for i, v in enumerate(values, first)]
    if not all(map(math.isfinite, values)):
        raise Slow
    ints = list(map(int, values))
    return ints if ints == values else values


def columns(blocks, chosen: tuple, floats, steps) -> tuple[list, ...]:
    """(step, loss, val_loss, lr, grad_norm, epoch) of the rows that hold a loss or a
    val_loss, as `log_columns.Records` keeps the first five (the epoch: None in every row
    unless an epoch column beside the step column is read). ``chosen``: the column names
    (None where absent)."""
    out: tuple[list, ...] = ([], [], [], [], [], [])
    for first, n, cells in blocks:
        for col, part in zip(out, _block(first, n, cells, chosen, floats, steps)):
            col.extend(part)
    if not out[0]:
        raise Slow                       # no values: the row reader says so
    return out


def _block(first, n, cells, chosen, floats, steps) -> tuple[list, ...]:
    step_c, loss_c, val_c, lr_c, grad_c, epoch_c = chosen
    none = [None] * n
    loss = floats(cells(loss_c)) if loss_c else none
    val = floats(cells(val_c)) if val_c else none
    lr = floats(cells(lr_c)) if lr_c else none
    grad = floats(cells(grad_c)) if grad_c else none
    epoch = floats(cells(epoch_c)) if epoch_c else none
    step = steps(cells(step_c), first) if step_c else list(range(first, first + n))
    keep = _kept(loss, val, n)
    if keep is None:
        return step, loss, val, lr, grad, epoch
    return tuple([col[i] for i in keep] for col in (step, loss, val, lr, grad, epoch))


def _kept(loss: list, val: list, n: int) -> list[int] | None:
    """Indices of the rows with a loss or a val_loss; None when that is every row."""
    if None not in loss:
        return None
    if None not in val:
        return None
    keep = [i for i, (a, b) in enumerate(zip(loss, val)) if a is not None or b is not None]
    return None if len(keep) == n else keep


def row_events(kind: str, with_grad: bool, steps: list, losses: list, vals: list, lrs: list,
               grads: list) -> Iterator[tuple]:
    """`logs.TrainingLog.events` of rows that all hold a loss (some a val_loss too):
    each row's loss event, then its ``kind`` event where it has a val_loss, as C-level
    zips over the runs of rows between evals (no generator frame per row)."""
    cols = [iter(c) for c in ((steps, losses, lrs, grads) if with_grad else (steps, losses, lrs))]
    tail = (None, None) if with_grad else (None,)
    parts, start = [], 0
    for j in compress(range(len(vals)), map(is_not, vals, repeat(None))):
        parts.append(zip(repeat("loss", j + 1 - start), *cols))
        parts.append(((kind, steps[j], vals[j], *tail),))
        start = j + 1
    parts.append(zip(repeat("loss"), *cols))
    return chain.from_iterable(parts)
