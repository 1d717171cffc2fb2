"""Spectral health of checkpoints: weightwatcher-compatible per-layer metrics.

``analyze(state_dict, engine="fast")`` selects layers as weightwatcher does
(``layers.select_layers``) and returns one ``LayerResult`` per layer. Engines:
``fast`` (Gram + eigvalsh, ``fast.py``) and ``weightwatcher`` (the real package,
``reference.py``, imported lazily). Nothing here imports torch or weightwatcher at
module level.
"""

from __future__ import annotations

from typing import Any, Mapping

from .layers import LayerSpec, select_layers
from .result import LayerResult

ENGINES = ("fast", "weightwatcher")


def analyze(
    state_dict: Mapping[str, Any],
    *,
    engine: str = "fast",
    device: str = "auto",
    min_evals: int = 8,
    max_evals: int = 15000,
    max_n: int = 50000,
    threads: int | None = None,
) -> list[LayerResult]:
    """Per-layer metrics of every selected layer of ``state_dict``.

    ``threads`` (fast engine on CPU): layers analysed at once; ``None`` uses the BLAS
    thread budget in force (a job worker pins it to ``threads_per_worker``), each layer
    then running with one BLAS thread. See ``fast.analyze_layers``.
    """
    specs = select_layers(state_dict, min_evals=min_evals, max_evals=max_evals, max_n=max_n)
    if engine == "fast":
        from . import fast

        return fast.analyze_layers(specs, device=device, threads=threads)
    if engine == "weightwatcher":
        from . import reference

        return reference.analyze_layers(specs)
    raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")


__all__ = ["ENGINES", "LayerResult", "LayerSpec", "analyze", "select_layers"]
