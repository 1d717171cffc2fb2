"""The ``fast`` engine: Gram matrix + symmetric eigensolver, batched, float64.

For an ``N x M`` layer (``N >= M``) the eigenvalues of ``W^T W`` are the squared
singular values weightwatcher gets from a full float64 SVD; forming the ``M x M`` Gram
(one GEMM) and calling ``eigvalsh`` is several times cheaper than ``gesdd``, and
layers of one shape are stacked into a single batched call. Both steps run in
float64 (torch when importable, numpy otherwise), on CUDA when ``device`` resolves
to it. Small eigenvalues of a Gram are only accurate to ``eps * lambda_max``
absolutely; they sit far below the power-law tail and below weightwatcher's 1e-5
cut-off, so the fit does not see the difference.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .layers import CONV2D_SCALE, LayerSpec
from .result import LayerResult, layer_metrics

BATCH_BYTES = 256 << 20  # float64 bytes of weights per batched call


def analyze_layers(specs: Iterable[LayerSpec], *, device: str = "auto") -> list[LayerResult]:
    """Metrics for every layer, in the order given."""
    specs = list(specs)
    evals = eigenvalues(specs, device=device)
    return [layer_metrics(spec, evals[spec.name]) for spec in specs]


def eigenvalues(specs: list[LayerSpec], *, device: str = "auto") -> dict[str, np.ndarray]:
    """Sorted (pooled) eigenvalues per layer name, computed group by group."""
    solve = _torch_solver(device) or _numpy_solver
    groups: dict[tuple, list[LayerSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.group_key, []).append(spec)
    out: dict[str, np.ndarray] = {}
    for members in groups.values():
        per = max(1, BATCH_BYTES // (8 * int(np.prod(members[0].tensor.shape))))
        for start in range(0, len(members), per):
            chunk = members[start : start + per]
            for spec, ev in zip(chunk, solve(chunk)):
                out[spec.name] = ev
    return out


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``."""
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_solver(device: str):
    try:
        import torch
    except ImportError:
        return None
    dev = torch.device(resolve_device(device))

    def solve(chunk: list[LayerSpec]) -> list[np.ndarray]:
        with torch.no_grad():
            mats = torch.stack([_as_torch(s.tensor, torch).to(dev, torch.float64) for s in chunk])
            mats = _slices(mats, chunk[0].kind)
            gram = mats.mT @ mats if mats.shape[-2] >= mats.shape[-1] else mats @ mats.mT
            ev = torch.linalg.eigvalsh(gram).clamp_min_(0.0).cpu().numpy()
        return _pool(ev, chunk)

    return solve


def _numpy_solver(chunk: list[LayerSpec]) -> list[np.ndarray]:
    mats = np.stack([np.asarray(s.tensor, dtype=np.float64) for s in chunk])
    mats = _slices(mats, chunk[0].kind)
    swap = np.swapaxes
    gram = swap(mats, -1, -2) @ mats if mats.shape[-2] >= mats.shape[-1] else mats @ swap(mats, -1, -2)
    return _pool(np.clip(np.linalg.eigvalsh(gram), 0.0, None), chunk)


def _slices(mats: Any, kind: str) -> Any:
    """(B, out, in, kh, kw) -> (B, kh*kw, out, in); dense stays (B, out, in)."""
    if kind != "conv2d":
        return mats
    b, o, i, kh, kw = mats.shape
    if hasattr(mats, "permute"):
        return mats.permute(0, 3, 4, 1, 2).reshape(b, kh * kw, o, i)
    return mats.transpose(0, 3, 4, 1, 2).reshape(b, kh * kw, o, i)


def _pool(ev: np.ndarray, chunk: list[LayerSpec]) -> list[np.ndarray]:
    if chunk[0].kind == "conv2d":
        ev = ev.reshape(len(chunk), -1) * CONV2D_SCALE
    return [np.sort(row) for row in ev]


def _as_torch(tensor: Any, torch: Any) -> Any:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach()
    return torch.from_numpy(np.asarray(tensor))
