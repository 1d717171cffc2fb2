"""Projection jobs: apply WW-PGD to a checkpoint and write ``<name>.wwpgd.<ext>``.

The projected checkpoint is written next to the input, to a temporary file in the
same directory, fsynced, then renamed over the target (atomic on POSIX), so a
trainer that sees ``projection_ready`` never reads a half-written file. A torch
checkpoint is written as the bare state_dict (optimizer state and other entries of
a wrapping dict are not carried over); a safetensors file stays safetensors.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ..spectral.checkpoint import infer_format
from ..spectral.layers import select_layers


def projected_path(path: str) -> str:
    """ckpt.pt -> ckpt.wwpgd.pt, model.safetensors -> model.wwpgd.safetensors."""
    head, tail = os.path.split(path)
    stem, dot, ext = tail.rpartition(".")
    name = f"{stem}.wwpgd.{ext}" if dot and stem else f"{tail}.wwpgd"
    return os.path.join(head, name)


def project_checkpoint(state_dict: dict[str, Any], path: str, fmt: str | None,
                       params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Project every selected layer of ``state_dict``; returns (written path, report)."""
    from wtwin.emitters.wwpgd import project_weight

    out = dict(state_dict)
    report: dict[str, Any] = {}
    for spec in select_layers(state_dict):
        new, info = project_weight(spec.tensor, spec.kind, q=params.get("q", 1.0), eta=params.get("eta", 0.5),
                                   beta=params.get("beta", 0.5), erg=params.get("erg", "preserve"))
        out[f"{spec.name}.weight"] = new.contiguous()
        report[spec.name] = {k: v for k, v in info.items() if k in ("projected", "alpha_before", "alpha_after")}
    target = projected_path(path)
    _atomic_save(out, target, infer_format(path, fmt))
    return target, report


def _atomic_save(tensors: dict[str, Any], target: str, fmt: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".wwpgd-", dir=os.path.dirname(target) or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            if fmt == "safetensors":
                from safetensors.torch import save

                fh.write(save(tensors))
            else:
                import torch

                torch.save(tensors, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
