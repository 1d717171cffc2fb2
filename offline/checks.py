"""What ``wtwin monitor`` says around the detectors' verdict: the preset when none is
named, caveats when a log is too short to judge, and the exit status for ``--fail-on``.

The preset: ``--preset`` always wins, then ``--kind`` (what the run is: ``rl``, ``gan``,
``contrastive`` are losses not meant to fall, ``stationary``). A Hugging Face ``trainer_state.json`` that looks
like a fine-tune (at most ``FINETUNE_MAX_STEPS`` steps, first loss below
``PRETRAINED_START``: the model did not start from scratch) gets ``finetuning``. Every
other log, CSV above all, gets ``pretraining``, as before.
"""

from __future__ import annotations

import math

from wtwin.emitters.wire import KIND_PRESETS

from .log_table import EPOCH_COLS, LOSS_COLS, VAL_COLS

FINETUNE_MAX_STEPS = 20_000
PRETRAINED_START = 7.0  # a language model from scratch starts near ln(vocab), 10 or more
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def is_trainer_state(meta: dict) -> bool:
    return isinstance(meta.get("global_step"), int) and "max_steps" in meta


def choose_preset(log, explicit: str | None, kind: str | None = None) -> tuple[str, str]:
    """(preset, where it comes from: ``--preset``, ``--kind``, ``trainer_state.json`` or
    ``default``). ``kind``: what the run is, as a trainer's ``run_start`` says it
    (`wire.KIND_PRESETS`: ``rl``, ``gan`` and ``contrastive`` pick ``stationary``)."""
    if explicit:
        return explicit, "--preset"
    if kind and kind in KIND_PRESETS:
        return KIND_PRESETS[kind], "--kind"
    if not is_trainer_state(log.meta):
        return "pretraining", "default"
    steps = log.meta.get("max_steps") or log.meta["global_step"]
    first = next((x for x in log.records.loss if x is not None and math.isfinite(x)), None)
    if isinstance(steps, int) and steps <= FINETUNE_MAX_STEPS and (first is None or first < PRETRAINED_START):
        return "finetuning", "trainer_state.json"
    return "pretraining", "trainer_state.json"


def preset_note(preset: str, source: str, log) -> str | None:
    """One line for the human output when the preset was not given nor the plain default."""
    if source != "trainer_state.json":
        return None
    steps = log.meta.get("max_steps") or log.meta.get("global_step")
    why = ("a fine-tune" if preset == "finetuning" else "not a fine-tune")
    return (f"preset {preset}: trainer_state.json of {steps} steps looks like {why} "
            f"(at most {FINETUNE_MAX_STEPS:,} steps from a first loss below {PRETRAINED_START:g}); "
            "--preset overrides")


def warmup_caveats(log, preset: str) -> list[str]:
    """A caveat when the log ends before the warm-up of detectors that page: their silence
    says nothing yet. Warm-ups are in steps since the first loss (``warmup`` arguments)."""
    from wtwin.detect import RunMonitor

    span, points = _loss_span(log.records)
    waiting = sorted((w, name) for name, det in RunMonitor(preset).detectors.items()
                     if isinstance(w := getattr(det, "warmup", None), int) and span < w)
    if not waiting:
        return []
    names = ", ".join(f"{name} ({w} steps)" for w, name in waiting)
    return [f"the log spans {span} steps ({points} points): shorter than the warm-up of "
            f"{names}: they had not started, so their silence means nothing yet "
            f"(non-finite losses are checked from the first step)"]


def _loss_span(rec) -> tuple[int, int]:
    """(steps from the first loss point to the last, loss points); every row's when the
    log has no loss (eval only). Read off the columns: no object per row."""
    if not len(rec):
        return 0, 0
    if not rec.n_loss:
        return rec.step[-1] - rec.step[0], len(rec)
    first = next(i for i, x in enumerate(rec.loss) if x is not None)
    last = len(rec) - 1 - next(i for i, x in enumerate(reversed(rec.loss)) if x is not None)
    return rec.step[last] - rec.step[first], rec.n_loss


def failed(alerts: list[dict], fail_on: str | None) -> bool:
    """True when an alert at or above ``fail_on`` (``warning`` or ``critical``) was found."""
    if fail_on is None:
        return False
    least = SEVERITY_RANK[fail_on]
    return any(a.get("active", True) and SEVERITY_RANK.get(a["severity"], 0) >= least for a in alerts)


def column_note(log) -> str | None:
    """A line when the loss columns were picked as the ones naming a loss
    (`log_table._named_loss`), not by a usual name nor ``--loss-col``."""
    picked = [f"{what} {col!r}" for what, col, usual in (
        ("training loss", log.loss_col, LOSS_COLS), ("validation loss", log.val_col, VAL_COLS))
        if col is not None and col.strip().lower() not in usual]
    if not picked:
        return None
    return (f"{' and '.join(picked)}: the columns that name a loss, as none has a usual name; "
            "--loss-col picks another")


# the human output's line on a step column that counts within each epoch
# (`log_table.steps_across_epochs`)
EPOCH_NOTE = ("the {col} column counts within each epoch (back to its start at every new "
              "epoch), so the steps here count on across epochs")


def step_note(scale: dict) -> str:
    """The human output's line on a step column read on another scale
    (`log_table.whole_steps`)."""
    col, times = scale["column"], scale["times"]
    if not times:
        return (f"the {col} column's values are not whole numbers of steps, so the steps "
                "here are the rows' numbers")
    why = ("counts epochs, read at" if col.strip().lower() in EPOCH_COLS
           else "counts in fractions, so the steps here are")
    return (f"the {col} column {why} {col} x {times:,} (step {int(1.25 * times):,} is "
            f"{col} 1.25)")
