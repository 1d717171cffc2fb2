"""A step column with fractional values (an ``epoch`` logged as 0.01, 0.02, ...): read
as whole steps (`log_table.whole_steps`), on both readers, and judged. Cut to ints, 100
points an epoch shared one step: the detectors judged one point of each hundred, their
warm-ups (in steps) never ended, and a blow-up at epoch 20 of 30 went unpaged."""

from __future__ import annotations

import json
import random

import pytest

from wtwin.offline.cli import main
from wtwin.offline.logs import read_log


def rows(n: int = 3000, per_epoch: int = 100, blowup_at: int | None = None):
    """(epoch, loss): a healthy descent, 100 points an epoch; ``blowup_at``: the point from
    which the loss climbs 0.002 a point."""
    rng = random.Random(0)
    for i in range(1, n + 1):
        up = 0.002 * (i - blowup_at) if blowup_at is not None and i > blowup_at else 0.0
        yield round(i / per_epoch, 2), 0.3 + 2 * (1 + i / 100) ** -0.6 + rng.gauss(0, 0.05) + up


def csv(path, data, quoted: bool = False):
    q = '"' if quoted else ""      # quoted cells: the csv module's reader, not the fast path
    path.write_text(f"{q}epoch{q},{q}loss{q}\n" + "".join(f"{q}{e}{q},{v:.4f}\n" for e, v in data))
    return str(path)


@pytest.mark.parametrize("quoted", [False, True])
def test_an_epoch_column_in_fractions_becomes_whole_steps(tmp_path, quoted):
    log = read_log(csv(tmp_path / "run.csv", rows(), quoted))
    assert log.step_col == "epoch" and log.step_scale == 100
    assert log.records.step[:3] == [1, 2, 3] and log.records.step[-1] == 3000
    assert all(type(s) is int for s in log.records.step)


def test_a_jsonl_epoch_in_fractions_too(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_text("".join(json.dumps({"epoch": e, "loss": v}) + "\n" for e, v in rows(500)))
    log = read_log(str(p))
    assert log.step_scale == 100 and log.records.step[-1] == 500


def test_values_no_power_of_ten_makes_whole_are_numbered_by_row(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("step,loss\n" + "".join(f"{i / 7},{2 - i / 1000}\n" for i in range(1, 201)))
    log = read_log(str(p))
    assert log.step_scale == 0 and log.records.step == list(range(1, 201))


def test_whole_steps_written_as_floats_stay_as_they_are(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("step,loss\n" + "".join(f"{i * 10}.0,{2 - i / 1000}\n" for i in range(1, 201)))
    log = read_log(str(p))
    assert log.step_scale == 1 and log.records.step[:2] == [10, 20]


def test_a_blow_up_in_an_epoch_indexed_log_pages_and_the_note_says_how_steps_read(tmp_path, capsys):
    path = csv(tmp_path / "run.csv", rows(blowup_at=2000))
    assert main(["monitor", path, "--json", "--fail-on", "warning"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["step_scale"] == {"column": "epoch", "times": 100}
    assert 2000 < res["first_alert_step"] < 2300, res["alerts"]
    assert not res["caveats"]
    main(["monitor", path])
    out = capsys.readouterr().out
    assert "the epoch column counts epochs, read at epoch x 100 (step 125 is epoch 1.25)" in out


def test_the_healthy_epoch_indexed_log_is_silent(tmp_path, capsys):
    assert main(["monitor", csv(tmp_path / "run.csv", rows()), "--fail-on", "warning"]) == 0


def per_epoch(path, data, quoted: bool = False, per: int = 100, resume_at: int | None = None):
    """(epoch, step within the epoch, loss) rows, as a logger that prints "Epoch [e],
    Step [s/100]" writes them; ``resume_at``: a row from which the run repeats 50 steps
    of its epoch (a resume: the step goes back, the epoch does not)."""
    q = '"' if quoted else ""
    out = [f"{q}epoch{q},{q}step{q},{q}loss{q}"]
    for i, (_, v) in enumerate(data):
        e, s = divmod(i, per)
        if resume_at is not None and i >= resume_at:
            e, s = divmod(i - 50, per)
        out.append(f"{e},{s},{v:.4f}")
    path.write_text("\n".join(out) + "\n")
    return str(path)


@pytest.mark.parametrize("quoted", [False, True])
def test_a_step_that_counts_within_each_epoch_counts_on_across_them(tmp_path, quoted):
    log = read_log(per_epoch(tmp_path / "run.csv", rows(), quoted))
    assert log.steps_in_epoch and log.step_col == "step"
    assert log.records.step == list(range(3000))


def test_a_resume_into_an_earlier_epoch_still_goes_back(tmp_path):
    """At row 1530 the run repeats 50 steps: (epoch 15, step 29) is followed by (epoch
    14, step 80). Epoch 14 counts from where it counted before, so the steps go back 49,
    a resume the detectors rewind for, not a new epoch."""
    log = read_log(per_epoch(tmp_path / "run.csv", rows(), resume_at=1530))
    assert log.steps_in_epoch
    assert log.records.step[1528:1532] == [1528, 1529, 1480, 1481]


def test_a_blow_up_in_a_log_of_per_epoch_steps_pages(tmp_path, capsys):
    """Read as they were, its 29 new epochs were 29 resumes: the detectors started over
    each time and the blow-up at step 2000 of 3000 went unpaged."""
    path = per_epoch(tmp_path / "run.csv", rows(blowup_at=2000))
    assert main(["monitor", path, "--json", "--fail-on", "warning"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["steps_in_epoch"] is True
    assert 2000 < res["first_alert_step"] < 2300, res["alerts"]
    assert not any(a["kind"] == "resume_jump" for a in res["alerts"])
    main(["monitor", path])
    assert "the step column counts within each epoch" in capsys.readouterr().out


@pytest.mark.parametrize("header, train, val", [
    ("step,total_loss,val_total_loss", "total_loss", "val_total_loss"),
    ("iteration,lm loss,loss scale,validation lm loss", "lm loss", "validation lm loss"),
    ("step,trainLoss,lossScale", "trainLoss", None),
    ("step,eval_ce_loss", None, "eval_ce_loss"),
])
def test_a_loss_column_without_a_usual_name_is_the_one_that_names_a_loss(tmp_path, capsys,
                                                                        header, train, val):
    """Megatron's "lm loss", a ``total_loss``: the one column whose name says loss (a loss
    scale is none), with a note; before, "no loss column found", exit 2."""
    p = tmp_path / "run.csv"
    width = header.count(",")
    p.write_text(header + "\n" + "".join(f"{i}" + ",2.0" * width + "\n" for i in range(1, 50)))
    log = read_log(str(p))
    assert (log.loss_col, log.val_col) == (train, val)
    assert main(["monitor", str(p)]) == 0
    assert "the columns that name a loss, as none has a usual name" in capsys.readouterr().out


def test_several_columns_naming_a_loss_ask_for_loss_col(tmp_path, capsys):
    p = tmp_path / "run.csv"
    p.write_text("step,lm_loss,aux_loss\n1,2.0,0.1\n2,1.9,0.1\n")
    assert main(["monitor", str(p)]) == 2
    err = capsys.readouterr().err
    assert "several name a loss (lm_loss, aux_loss): name one with --loss-col" in err
    assert main(["monitor", str(p), "--loss-col", "aux_loss"]) == 0


def keras(path, blowup_at: int | None = None, epochs: int = 100, seed: int = 0):
    """A Keras CSVLogger log: one row an epoch, ``epoch,loss,val_loss``; ``blowup_at``:
    the epoch from which both climb 0.05 an epoch."""
    rng = random.Random(seed)
    out = ["epoch,loss,val_loss"]
    for e in range(epochs):
        up = 0.05 * (e - blowup_at) if blowup_at is not None and e > blowup_at else 0.0
        out.append(f"{e},{0.3 + 2 * (1 + e) ** -0.6 + rng.gauss(0, 0.01) + up:.4f},"
                   f"{0.4 + 2 * (1 + e) ** -0.6 + rng.gauss(0, 0.01) + up:.4f}")
    path.write_text("\n".join(out) + "\n")
    return str(path)


def test_an_epoch_column_is_read_at_100_steps_an_epoch(tmp_path):
    log = read_log(keras(tmp_path / "run.csv"))
    assert log.step_scale == 100 and log.records.step[:3] == [0, 100, 200]


def test_an_epoch_repeated_over_rows_is_numbered_by_row(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("epoch,loss\n" + "".join(f"{i // 50},{2 - i / 1000}\n" for i in range(500)))
    log = read_log(str(p))
    assert log.step_scale == 0 and log.records.step == list(range(1, 501))


def test_a_loss_that_runs_away_in_a_per_epoch_log_pages_as_it(tmp_path, capsys):
    """100 epochs, both losses climbing from epoch 60. Read at one step an epoch, the
    detectors never left their warm-ups (300 steps) and the one page was an overfit
    "while the training loss still falls", at epoch 80."""
    path = keras(tmp_path / "run.csv", blowup_at=60)
    assert main(["monitor", path, "--json", "--fail-on", "critical"]) == 1
    res = json.loads(capsys.readouterr().out)
    kinds = [(a["kind"], a["severity"], a["step"] // 100) for a in res["alerts"]]
    assert kinds[0][0] == "drift" and 60 < kinds[0][2] <= 70, kinds
    assert ("divergence", "critical") in [k[:2] for k in kinds]
    assert "overfit" not in [k[0] for k in kinds]
    assert res["step_scale"] == {"column": "epoch", "times": 100} and not res["caveats"]


@pytest.mark.parametrize("seed", range(3))
def test_a_healthy_per_epoch_log_is_silent(tmp_path, capsys, seed):
    assert main(["monitor", keras(tmp_path / "run.csv", seed=seed), "--fail-on", "warning"]) == 0
    assert "the epoch column counts epochs, read at epoch x 100" in capsys.readouterr().out


def test_a_semicolon_csv_with_decimal_commas_reads(tmp_path):
    """A European spreadsheet's export: ``;`` between cells, ``,`` in numbers (before:
    "loss value '2,3602' is not a number", exit 2). In a CSV separated by commas a
    quoted "1,5" stays what it was: not a number."""
    p = tmp_path / "run.csv"
    p.write_text("step;loss;lr\n" + "".join(f"{i};{2 - i / 1000:.4f};1e-4\n".replace(".", ",")
                                          .replace("1e-4", "0,0001") for i in range(1, 301)))
    log = read_log(str(p))
    assert log.records.loss[:2] == [1.999, 1.998] and log.records.lr[0] == 0.0001
    assert log.records.step[:2] == [1, 2]
    q = tmp_path / "quoted.csv"
    q.write_text('step,loss\n1,"1,5"\n')
    with pytest.raises(Exception, match="is not a number"):
        read_log(str(q))
