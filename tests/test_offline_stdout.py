"""``wtwin monitor`` on what Megatron-LM and nanoGPT print (`offline/log_stdout.py`).

The logs are written line for line in the formats of the trainers' own print statements
(Megatron-LM's ``training_log``, nanoGPT's ``train.py``): no real log with timing is in
shared/data and none was downloaded. ``--timing`` reads their per-iteration time as
``step_time_s``: a healthy log and one with periodic checkpoint stalls are silent, one
whose iterations take 1.5x longer for long enough pages ``throughput``; without
``--timing`` the loss's verdicts alone."""

from __future__ import annotations

import contextlib
import io
import json
import random
from datetime import datetime, timedelta

import pytest

from wtwin.offline.cli import main
from wtwin.offline.logs import LogError, read_log

MEGATRON_HEAD = """using world size: 8, data-parallel size: 8, tensor-model-parallel size: 1
> building GPT2BPETokenizer tokenizer ...
[after dataloaders are built] datetime: 2024-05-01 09:59:58
training ...
"""
NANOGPT_HEAD = """Overriding config with config/train_gpt2.py:
tokens per iteration will be: 491,520
Initializing a new model from scratch
number of parameters: 123.59M
using fused AdamW: True
compiling the model... (takes a ~minute)
"""


def iteration_ms(it: int, rng, slow_from=None, factor=1.5) -> float:
    ms = 412.0 * (1 + 0.03 * rng.random())
    return ms * factor if slow_from is not None and it >= slow_from else ms


def loss_at(it: int, rng) -> float:
    return 2.8 + 8.0 * (it + 50) ** -0.35 + rng.gauss(0, 0.01)


def megatron(path, iters=6000, every=10, slow_from=None, save_every=0, save_s=20.0,
             dated=True, tokens=False):
    """Megatron-LM's iteration lines; ``save_every``: a checkpoint save (its time is not in
    the interval's time, as Megatron stops its timer around the save; it is in the date)."""
    rng, now = random.Random(0), datetime(2024, 5, 1, 10, 0, 0)
    lines = [MEGATRON_HEAD]
    for it in range(every, iters + 1, every):
        ms = iteration_ms(it, rng, slow_from)
        now += timedelta(milliseconds=ms * every)
        date = f" [{now.strftime('%Y-%m-%d %H:%M:%S')}]" if dated else ""
        tok = f" consumed tokens: {it * 512 * 2048:12d} |" if tokens else ""
        lines.append(
            f"{date} iteration {it:8d}/{iters:8d} | consumed samples: {it * 512:12d} |{tok}"
            f" elapsed time per iteration (ms): {ms:.1f} | learning rate: {3e-4:.6E} |"
            f" global batch size: {512:5d} | lm loss: {loss_at(it, rng):.6E} |"
            f" loss scale: {1.0:.1f} | grad norm: {0.5 + 0.1 * rng.random():.3f} |"
            f" number of skipped iterations: {0:3d} | number of nan iterations: {0:3d} |")
        if save_every and it % save_every == 0:
            lines.append(f"saving checkpoint at iteration {it:7d} to /ckpt/gpt")
            now += timedelta(seconds=save_s)
            lines.append(f"  successfully saved checkpoint at iteration {it:7d} to /ckpt/gpt")
        if it % 1000 == 0:
            lines.append("-" * 100)
            lines.append(f" validation loss at iteration {it} | lm loss value: "
                         f"{loss_at(it, rng) + 0.05:.6E} | lm loss PPL: 2.478E+01 | ")
            lines.append("-" * 100)
    path.write_text("\n".join(lines) + "\n")
    return path


def nanogpt(path, iters=6000, every=10, slow_from=None, eval_every=500, eval_s=20.0):
    """nanoGPT's ``iter`` lines; every ``eval_every`` iterations an evaluation and a
    checkpoint, whose ``eval_s`` seconds are in that iteration's ``time``."""
    rng = random.Random(0)
    lines = [NANOGPT_HEAD]
    for it in range(0, iters + 1):
        if it % eval_every == 0:
            lines.append(f"step {it}: train loss {loss_at(it, rng):.4f}, val loss {loss_at(it, rng) + 0.05:.4f}")
            if it > 0:
                lines.append("saving checkpoint to out")
        if it % every == 0:
            ms = 35061.38 if it == 0 else iteration_ms(it, rng, slow_from)
            if it % eval_every == 0 and it > 0:
                ms += eval_s * 1000
            mfu = -100.0 if it < 5 * every else 35.0 + rng.random()
            lines.append(f"iter {it}: loss {loss_at(it, rng):.4f}, time {ms:.2f}ms, mfu {mfu:.2f}%")
    path.write_text("\n".join(lines) + "\n")
    return path


def monitor(path, *extra) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["monitor", str(path), "--json", *extra])
    assert rc == 0
    return json.loads(out.getvalue())


def kinds(res: dict) -> list[str]:
    return [a["kind"] for a in res["alerts"]]


class TestRead:
    def test_megatron_lines_give_loss_lr_grad_norm_and_validation(self, tmp_path):
        """Every iteration line a loss point; the validation lines the validation loss."""
        log = read_log(megatron(tmp_path / "megatron.log", iters=2000))
        assert log.n_loss == 200 and log.n_val == 2
        first = next(log.events(with_grad=True))
        assert first[:2] == ("loss", 10) and first[3] == pytest.approx(3e-4)
        assert 0.5 <= first[4] <= 0.6

    def test_nanogpt_lines_give_loss_and_validation(self, tmp_path):
        log = read_log(nanogpt(tmp_path / "nanogpt.txt", iters=1000))
        assert log.n_loss == 101 and log.n_val == 3

    def test_a_text_that_is_no_log_still_says_so(self, tmp_path):
        path = tmp_path / "notes.txt"
        path.write_text("iteration went well\nnothing to read here\n")
        with pytest.raises(LogError, match="no loss column"):
            read_log(path)


@pytest.mark.parametrize("write", [megatron, nanogpt])
class TestTiming:
    def test_a_healthy_log_is_silent(self, tmp_path, write):
        assert monitor(write(tmp_path / "run.log"), "--timing")["alerts"] == []

    def test_iterations_that_take_1_5x_longer_page_throughput(self, tmp_path, write):
        """1.5x from iteration 3,000 (0.41 s): paged once held 3 min, only with --timing."""
        path = write(tmp_path / "run.log", slow_from=3000)
        res = monitor(path, "--timing")
        assert kinds(res) == ["throughput"]
        (page,) = res["alerts"]
        assert 3000 < page["step"] < 3000 + 800 and "1.5x" in page["message"]
        assert monitor(path)["alerts"] == []

    def test_periodic_checkpoint_stalls_are_silent(self, tmp_path, write):
        """A 20 s save every 500 iterations (in the date, or in nanoGPT's iteration time)."""
        kw = {"save_every": 500} if write is megatron else {"eval_every": 500}
        assert monitor(write(tmp_path / "run.log", **kw), "--timing")["alerts"] == []


def test_megatron_without_dates_and_with_tokens(tmp_path):
    """No date printed: the step times summed are the clock; ``consumed tokens`` makes it
    judge the time per token."""
    path = megatron(tmp_path / "run.log", slow_from=3000, dated=False, tokens=True)
    res = monitor(path, "--timing")
    assert kinds(res) == ["throughput"] and "tokens/s" in res["alerts"][0]["message"]
