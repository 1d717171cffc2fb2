"""Log readers: CSV, JSONL, trainer_state.json, the real logs, and bad files."""

from __future__ import annotations

import json
import math
import os
import pathlib

import pytest

from wtwin.offline.logs import LogError, read_log

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real-logs"
needs_data = pytest.mark.skipif(not DATA.is_dir() and os.environ.get("CI") != "true",
                                reason="../shared/data is absent")


class TestFormats:
    def test_csv_aliases_empty_cells_and_nan(self, tmp_path):
        p = tmp_path / "a.csv"
        p.write_text("iter,train_loss,eval_loss,learning_rate\n1,3.0,,1e-3\n2,nan,,1e-3\n3,,2.9,\n")
        log = read_log(p)
        assert (log.loss_col, log.val_col, log.lr_col) == ("train_loss", "eval_loss", "learning_rate")
        r = log.records
        assert r[0].loss == 3.0 and r[0].lr == 1e-3 and math.isnan(r[1].loss) and r[2].val_loss == 2.9
        assert [e[0] for e in log.events()] == ["loss", "loss", "eval"]

    def test_jsonl_and_explicit_loss_col(self, tmp_path):
        p = tmp_path / "a.jsonl"
        p.write_text("\n".join(json.dumps({"step": i, "loss": 3 - i / 10, "my_loss": i}) for i in range(5)))
        assert read_log(p).records[1].loss == 2.9
        assert read_log(p, loss_col="my_loss").records[1].loss == 1.0

    def test_trainer_state_json(self, tmp_path):
        p = tmp_path / "trainer_state.json"
        hist = [{"step": 10, "loss": 2.0, "learning_rate": 1e-4, "epoch": 0.1},
                {"step": 10, "eval_loss": 2.1, "epoch": 0.1}, {"step": 20, "loss": 1.9}]
        p.write_text(json.dumps({"global_step": 20, "log_history": hist}))
        log = read_log(p)
        assert [(r.step, r.loss, r.val_loss) for r in log.records] == [(10, 2.0, None), (10, None, 2.1), (20, 1.9, None)]

    def test_eval_only_feeds_the_loss_stream(self, tmp_path):
        p = tmp_path / "e.csv"
        p.write_text("step,loss,val_loss\n586,,8.0\n1172,,7.99\n")
        assert [e[0] for e in read_log(p).events()] == ["loss", "loss"]


class TestBadFiles:
    @pytest.mark.parametrize("content,match", [
        (b"", "empty"), (b"step,acc\n1,0.5\n", "no loss column"),
        (b"step,loss\n1,abc\n", "not a number"), (b"\x89PNG\r\n\x1a\n\x00\x00", "binary"),
        (b"step,loss\n", "no loss values")])
    def test_one_sentence_errors(self, tmp_path, content, match):
        p = tmp_path / "bad.csv"
        p.write_bytes(content)
        with pytest.raises(LogError, match=match) as e:
            read_log(p)
        assert "\n" not in str(e.value)

    def test_missing_file_and_missing_column(self, tmp_path):
        with pytest.raises(LogError, match="cannot read"):
            read_log(tmp_path / "nope.csv")
        p = tmp_path / "a.csv"
        p.write_text("step,loss\n1,2\n")
        with pytest.raises(LogError, match="no loss column named"):
            read_log(p, loss_col="zzz")


@needs_data
class TestRealLogs:
    def test_every_real_log_reads(self):
        files = [p for p in DATA.glob("*.csv") if p.name != "manifest.csv"]
        assert len(files) >= 30
        for p in files:
            log = read_log(p)
            assert log.records and (log.n_loss or log.n_val)

    def test_mlperf_eval_only(self):
        log = read_log(DATA / "mlperf10__bert_supermicro_as2124gq_result1_aborted_stuck.csv")
        assert log.n_loss == 0 and log.n_val == 23
