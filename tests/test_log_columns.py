"""The column reader (`log_columns`) gives what the row reader (`logs._build`) gives:
the same records, or the same error, on plain, odd and bad files and on every real log."""

from __future__ import annotations

import json
import math
import os
import pathlib

import pytest

from wtwin.offline import log_columns, logs
from wtwin.offline.logs import LogError, read_log

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir() and os.environ.get("CI") != "true",
                                reason="../shared/data is absent")

CSV = {
    "plain": "step,loss,val_loss,lr\n1,3.0,,1e-3\n2,2.9,2.95,1e-3\n3,,2.9,\n4,nan,,2e-3\n",
    "crlf and blank lines": "step,loss\r\n1,2\r\n\r\n3,4\r\n\r\n",
    "empty steps are row indices": "step,loss\n,1\n,2\n5,3\n",
    "float and exponent steps": "step,loss\n1.5,2\n2.7,3\n1e3,1\n",
    "steps past 2**53 round as float() does": "step,loss\n9007199254740993,1\n99999999999999999999,2\n",
    "no step column": "loss,val_loss\n1,\n,2\n3,\n",
    "a bad lr on a row without a loss": "step,loss,lr\n1,,abc\n2,3,1e-3\n",
    "a bad step on a row without a loss": "step,loss,val_loss\nabc,,\n2,3,\n",
    "whitespace around numbers": "step,loss\n1, 1.5 \n2,2\n",
    "a whitespace-only line": "step,loss\n1,2\n  \n3,4\n",
    "ragged rows": "step,loss,lr\n1,2\n3,4,5,6\n7,8,9\n",
    "one column": "loss\n1\n 2\n \n3\n",
    "inf and nan losses": "step,loss\n1,nan\n2,inf\n3,-inf\n",
    "underscores and other digits": "step,loss\n1_000,1_0.5\n\u0663,2\n",
    "a loss that is not a number": "step,loss\n1,2\n2,abc\n",
    "a bad lr where a loss is": "step,loss,lr\n1,2,abc\n",
    "a step that is not finite": "step,loss\n1,1\nnan,2\n",
    "no values": "step,loss\n\n",
    "grad norms": "step,loss,grad_norm,lr\n1,2,0.5,1e-3\n2,2.1,,\n",
}
JSONL = {
    "numbers": [{"step": i, "loss": 3 - i / 10, "lr": 1e-3} for i in range(5)],
    "strings the row reader parses": [{"step": "1", "loss": "2.5"}, {"step": 2, "loss": ""}],
    "a bool": [{"step": 1, "loss": True}],
    "nulls": [{"step": 1, "loss": None, "val_loss": 2}, {"step": None, "loss": 1}],
    "big ints": [{"step": 2 ** 70, "loss": 1}, {"step": 2 ** 53 + 1, "loss": 1}],
    "an int too large for a float": [{"step": 1, "loss": 10 ** 400}],
    "eval rows between loss rows": [{"step": 1, "loss": 1}, {"step": 2, "loss": 2, "eval_loss": 1.5},
                                    {"step": 3, "eval_loss": 1.4}],
}

JSONL_TEXT = {
    "padded lines": ' {"step": 1, "loss": 2}\n{"step": 2, "loss": 1}  \n',
    "two values on a line": '{"step": 1, "loss": 2} {"step": 2, "loss": 1}\n{"step": 3, "loss": 1}\n',
    "crlf and blank lines": '{"step": 1, "loss": 2}\r\n\r\n  \n{"step": 2, "loss": 1}\r\n',
    "a broken line": '{"step": 1, "loss": 2}\n{"step": 2, "loss": \n{"step": 3, "loss": 1}\n',
    "not objects": '{"step": 1, "loss": 2}\n[1, 2]\n',
}


def outcome(read):
    """What a reader gives: the columns and the chosen columns, or the error's sentence."""
    try:
        log = read()
    except LogError as e:
        return "error", str(e)
    cols = tuple(tuple(("nan" if isinstance(x, float) and math.isnan(x) else x) for x in c)
                 for c in log.records.columns())
    return cols, (log.loss_col, log.val_col, log.lr_col, log.step_col, log.grad_col, log.n_loss, log.n_val)


def by_rows(path):
    text = logs._read_text(path)
    if text.lstrip()[:1] in ("{", "["):
        raise AssertionError("JSON: use json_by_rows")
    return logs._csv_by_rows(path, text, None)


def json_by_rows(path, rows):
    return logs._build(path, rows, list(dict.fromkeys(k for r in rows for k in r)))


def jsonl_by_lines(path):
    """JSON lines as the reader took them before its scanner pass: json.loads a line."""
    rows = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise LogError(f"{path}: line {i + 1} is not valid JSON.") from None
    if not all(isinstance(r, dict) for r in rows):
        raise LogError(f"{path}: expected JSON objects, one per log entry.")
    return json_by_rows(path, rows)


class TestSameAsTheRowReader:
    @pytest.mark.parametrize("name", list(CSV))
    def test_csv(self, tmp_path, name):
        p = tmp_path / "log.csv"
        p.write_text(CSV[name])
        assert outcome(lambda: read_log(p)) == outcome(lambda: by_rows(p))

    @pytest.mark.parametrize("name", list(JSONL))
    def test_jsonl(self, tmp_path, name):
        p = tmp_path / "log.jsonl"
        p.write_text("\n".join(json.dumps(r) for r in JSONL[name]) + "\n")
        assert outcome(lambda: read_log(p)) == outcome(lambda: json_by_rows(p, JSONL[name]))

    @pytest.mark.parametrize("name", list(JSONL_TEXT))
    def test_json_lines_as_json_loads_reads_each(self, tmp_path, name):
        p = tmp_path / "log.jsonl"
        p.write_bytes(JSONL_TEXT[name].encode())
        assert outcome(lambda: read_log(p)) == outcome(lambda: jsonl_by_lines(p))

    def test_the_plain_shapes_take_the_column_path(self, tmp_path):
        """The comparisons above would say nothing if every file went row by row."""
        p = tmp_path / "log.csv"
        p.write_text(CSV["plain"])
        assert logs._csv_by_columns(p, p.read_text(), None) is not None
        assert log_columns.plain_csv('"step","loss"\n1,2\n') is None
        with pytest.raises(log_columns.Slow):
            list(log_columns.plain_csv(CSV["ragged rows"])[1])

    def test_blocks_join_up(self, tmp_path):
        """A log of several blocks, blank lines and empty steps among them, reads the same."""
        rows = (f"{'' if t % 5000 == 0 else t},{1 + 1 / t},{'' if t % 7 else 2}\n{'' if t % 999 else chr(10)}"
                for t in range(1, 100_000))
        p = tmp_path / "log.csv"
        p.write_text("step,loss,val_loss\n" + "".join(rows))
        assert p.stat().st_size > 2 * log_columns.BLOCK
        assert logs._csv_by_columns(p, p.read_text(), None) is not None
        assert outcome(lambda: read_log(p)) == outcome(lambda: by_rows(p))


class TestBadInputIsOneSentence:
    def test_bare_cr_line_ends(self, tmp_path):
        p = tmp_path / "mac.csv"
        p.write_bytes(b"step,loss\r1,2\r3,4\r")
        with pytest.raises(LogError, match="not a readable CSV file"):
            read_log(p)

    def test_a_number_too_large_for_a_float(self, tmp_path):
        p = tmp_path / "big.jsonl"
        p.write_text('{"step": 1, "loss": 1' + "0" * 400 + "}\n")
        with pytest.raises(LogError, match="row 1: loss value 10+... is too large"):
            read_log(p)


@pytest.mark.slow  # 17 s on 2 busy cores (make test-all, CI)
@needs_data
def test_every_real_log_reads_the_same_both_ways():
    files = [p for d in ("real-logs", "real-logs-lr") for p in (DATA / d).glob("*.csv")
             if p.name != "manifest.csv"]
    assert len(files) >= 50
    for p in files:
        assert logs._csv_by_columns(p, logs._read_text(p), None) is not None, p
        assert outcome(lambda: read_log(p)) == outcome(lambda: by_rows(p)), p
