"""Presets: each detector's arguments per kind of run. Units are in docs/PRESETS.md.

``custom`` is ``pretraining`` under another name: the same detectors with the same
defaults, so it assumes what ``pretraining`` assumes (a curve that falls as a power law
of the step or of the summed learning rate, warm-up of a few hundred steps); it is the
name to use when you override arguments yourself, as
``RunMonitor("custom", forecast={"threshold": 30.0}, spike={"z": 6.0})``.
"""

from __future__ import annotations

PRETRAINING = {
    "effect": {},
    "forecast": {},
    "rise": {},
    "spike": {},
    "divergence": {},
    "early_rise": {},
    "plateau": {},
    "overfit": {},
    "resume_jump": {},
}

PRESET_PARAMS = {
    "pretraining": PRETRAINING,
    # continued pre-training from a checkpoint: starts low, falls slowly, warm-up short
    "adaptive_pretraining": {
        "effect": {},
        "forecast": {"warmup": 200, "refit_min": 25},
        "rise": {},
        "spike": {},
        "divergence": {},
        "early_rise": {},
        "plateau": {"min_progress": 0.005, "grace": 2000},
        "overfit": {},
        "resume_jump": {},
    },
    # fine-tuning: exponential-to-floor forecast, short runs, few hundred steps
    "finetuning": {
        "effect": {"halflife": 30.0},
        "finetuning": {"warmup": 50, "holdout_min": 20, "refit_min": 10},
        "rise": {"warmup": 50, "halflife": 30.0, "noise_halflife": 300.0},
        "spike": {"warmup": 10},
        "divergence": {"warmup": 20},
        # a loss several-fold above its start early in the run (a warm-up rise), not in
        # "stationary": a loss not meant to fall may start low
        "early_rise": {},
        # an exponential approach to a floor is the expected shape, not a collapse of the slope
        "plateau": {"min_progress": 0.01, "grace": 300, "window": 200, "slowdown": False},
        "overfit": {"patience": 2},
        "resume_jump": {},
    },
    # a loss not meant to fall (an RL value or policy loss, a GAN's, a contrastive loss at
    # equilibrium): judged in units of its own wobble, on run-aways against its recent
    # best and on sustained jumps; no forecast, drift or plateau pages (`rules.judge`)
    "stationary": {
        "effect": {"falls": False},
        "forecast": {},
        "rise": {},
        "spike": {},
        "divergence": {"best_halflife": 3000.0, "z": 40.0},
        "plateau": {},
        "overfit": {},
        "resume_jump": {},
    },
    "custom": PRETRAINING,
}

# every preset runs these too, with their defaults (a preset may not override them, a run
# may: the chance level is the run's own): the obvious failures, the grad norm's context
# for a page, the frozen data loader, the loss at chance, and the run's time and memory
# (silent on a run that sends neither)
EVERY_RUN = {
    "nonfinite": {},
    "gradnorm": {},
    "frozen_loader": {},
    "chance": {},
    "throughput": {},
    "memory": {},
}

PRESETS = tuple(PRESET_PARAMS)   # the names, as the config and CLI validate them
