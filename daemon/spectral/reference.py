"""The ``weightwatcher`` engine: the real package (``wtwin[spectral]``), the reference.

weightwatcher costs seconds and hundreds of MB to import, so it is imported here,
inside the call, and only job workers call it. The state_dict is handed to
``WeightWatcher(model=state_dict).analyze(detX=True)`` as is (weightwatcher's own
``PyStateDictLayer`` path), restricted to the layers ``select_layers`` chose, and
its rows are mapped onto ``LayerResult``.

On a CUDA machine weightwatcher converts weights to float16 before its SVD
(``torch_T_to_np`` in ``RMT_Util``); its figures there are less precise than ours.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any

from .layers import LayerSpec
from .result import LayerResult

_NO_LIMIT = 1 << 40  # select_layers already applied the size rules


def analyze_layers(specs: list[LayerSpec], **_: Any) -> list[LayerResult]:
    """Metrics for every layer, computed by weightwatcher itself."""
    import torch
    import weightwatcher

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    model = {f"{s.name}.weight": _as_torch(s.tensor, torch) for s in specs}
    if not model:
        return []
    watcher = weightwatcher.WeightWatcher(model=model)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # it print()s and warns
        warnings.simplefilter("ignore")
        details = watcher.analyze(detX=True, min_evals=1, max_evals=_NO_LIMIT, max_N=_NO_LIMIT)
    rows = {row["name"]: row for row in details.to_dict("records")}
    return [_result(spec, rows[spec.name]) for spec in specs]


def _result(spec: LayerSpec, row: dict) -> LayerResult:
    return LayerResult.of(
        spec, row.get("status") == "success",
        num_evals=int(row["num_evals"]),
        alpha=float(row["alpha"]),
        alpha_weighted=float(row["alpha_weighted"]),
        xmin=float(row["xmin"]),
        num_pl_spikes=int(row["num_pl_spikes"]),
        D=float(row["D"]),
        sigma=float(row["sigma"]),
        lambda_max=float(row["lambda_max"]),
        stable_rank=float(row["stable_rank"]),
        log_norm=float(row["log_norm"]),
        log_spectral_norm=float(row["log_spectral_norm"]),
        detX_num=int(row["detX_num"]),
        erg_gap=int(row["ERG_gap"]),
    )


def _as_torch(tensor: Any, torch: Any) -> Any:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach().cpu()
    return torch.as_tensor(tensor)
