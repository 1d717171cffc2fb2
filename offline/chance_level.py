"""The loss at chance for ``wtwin monitor`` (`wtwin.detect.chance`): ``--chance X`` as
given, ``--classes N`` as ln N, else the model's ``config.json`` beside a
``trainer_state.json`` (Hugging Face saves both in each checkpoint folder), read as the
callback reads the model (`wtwin.emitters.model_classes`). 0.0 when none says."""

from __future__ import annotations

import json
import math
import os

from wtwin.emitters.model_classes import classes_of

from .logs import LogError


def chance_level(path: str, classes: int | None = None, chance: float | None = None) -> tuple[float, str]:
    """(the loss at chance, where it came from: "" when unknown)."""
    if chance is not None:
        if not (math.isfinite(chance) and chance > 0):
            raise LogError(f"--chance {chance}: the loss at chance must be a number > 0.")
        return chance, "--chance"
    if classes is not None:
        if classes < 2:
            raise LogError(f"--classes {classes}: a cross-entropy is over 2 classes or more.")
        return math.log(classes), "--classes"
    if os.path.basename(path) != "trainer_state.json":
        return 0.0, ""
    beside = os.path.join(os.path.dirname(path), "config.json")
    try:
        with open(beside, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return 0.0, ""      # no model config beside it (or not one): chance unknown
    if not isinstance(config, dict):
        return 0.0, ""
    arch = config.get("architectures")
    name = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else ""
    n = classes_of(name, config)
    return (math.log(n), f"{beside} ({name}: {n} classes)") if n else (0.0, "")
