"""Which tensors of a state_dict are analysed, and as what: weightwatcher's rules.

weightwatcher reads a plain ``state_dict`` through its ``PyStateDictLayer``: every key
ending in ``.weight`` is a layer; a 2-D tensor is DENSE (this covers Linear and
Embedding), a 4-D one is CONV2D (torch layout ``out, in, kh, kw``), anything else
(1-D norms, 3-D Conv1d) is skipped. A dense layer gives ``M = min(shape)``
eigenvalues; a Conv2d gives ``M`` per kernel position, ``rf = kh * kw`` slices pooled
after scaling each slice by ``sqrt(1/2)`` (``conv2d_norm``). A layer is kept when
``min_evals <= M * rf <= max_evals`` and ``N <= max_N``.

One quirk is kept on purpose: weightwatcher swaps ``N, M`` once per slice when a
Conv2d has fewer outputs than inputs, so with an even ``rf`` the ``M`` it checks
against ``min_evals``/``max_evals`` is the larger dimension. The eigenvalues do not
change; only which layers pass the size filter does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

MIN_EVALS = 8
MAX_EVALS = 15000
MAX_N = 50000
CONV2D_SCALE = 0.5  # eigenvalue scale of a pooled Conv2d slice: (sqrt(1/2))**2


@dataclass(frozen=True)
class LayerSpec:
    """One analysable layer. ``n``/``m`` are the true larger/smaller matrix sizes."""

    name: str
    kind: str  # "dense" | "conv2d"
    n: int
    m: int
    rf: int
    tensor: Any  # torch.Tensor or numpy array, as loaded

    @property
    def num_evals(self) -> int:
        return self.m * self.rf

    @property
    def group_key(self) -> tuple:
        """Layers with equal keys can be batched in one eigensolve."""
        return (self.kind, tuple(self.tensor.shape))


def select_layers(
    state_dict: Mapping[str, Any],
    *,
    min_evals: int = MIN_EVALS,
    max_evals: int = MAX_EVALS,
    max_n: int = MAX_N,
) -> list[LayerSpec]:
    """The layers weightwatcher would analyse, in state_dict order."""
    out = []
    for key, tensor in state_dict.items():
        if not key.endswith(".weight") or not hasattr(tensor, "shape"):
            continue
        spec = _spec(key[: -len(".weight")], tensor)
        if spec is not None and _supported(spec, min_evals, max_evals, max_n):
            out.append(spec)
    return out


def _spec(name: str, tensor: Any) -> LayerSpec | None:
    shape = tuple(int(s) for s in tensor.shape)
    if len(shape) == 2 and shape[0] >= 2:
        return LayerSpec(name, "dense", max(shape), min(shape), 1, tensor)
    if len(shape) == 4:
        out_ch, in_ch, kh, kw = shape
        return LayerSpec(name, "conv2d", max(out_ch, in_ch), min(out_ch, in_ch), kh * kw, tensor)
    return None


def _ww_nm(spec: LayerSpec) -> tuple[int, int]:
    """(N, M) as weightwatcher's conv2D_Wmats leaves them (see module docstring)."""
    if spec.kind != "conv2d":
        return spec.n, spec.m
    out_ch, in_ch = int(spec.tensor.shape[0]), int(spec.tensor.shape[1])
    if out_ch < in_ch and spec.rf % 2 == 0:
        return out_ch, in_ch
    return spec.n, spec.m


def _supported(spec: LayerSpec, min_evals: int, max_evals: int, max_n: int) -> bool:
    n, m = _ww_nm(spec)
    if min_evals and m * spec.rf < min_evals:
        return False
    if max_evals and m * spec.rf > max_evals:
        return False
    return n <= max_n
