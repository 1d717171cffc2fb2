"""The ``fast`` engine: Gram matrix + symmetric eigensolver, batched, float64.

For an ``N x M`` layer (``N >= M``) the eigenvalues of ``W^T W`` are the squared
singular values weightwatcher gets from a full float64 SVD; forming the ``M x M`` Gram
(one GEMM) and calling ``eigvalsh`` is several times cheaper than ``gesdd``, and
on CUDA layers of one shape are stacked into a single batched call. Both steps
run in float64: numpy/LAPACK on CPU, torch on CUDA when ``device`` resolves to it
(the CUDA path is not exercised by the test suite on CPU-only machines). Small eigenvalues of a Gram are only accurate to ``eps * lambda_max``
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
    """Sorted (pooled) eigenvalues per layer name.

    On CPU each matrix goes through numpy's ``a.T @ a`` (which BLAS computes as a
    SYRK: half the flops of a GEMM, and faster than torch's batched GEMM here) and
    LAPACK ``syev``; on CUDA same-shaped layers are stacked into one batched
    ``bmm`` + ``eigvalsh``.
    """
    dev = resolve_device(device)
    if dev == "cpu":
        return {spec.name: _cpu_eigenvalues(spec) for spec in specs}
    solve = _torch_solver(dev)
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


def _cpu_eigenvalues(spec: LayerSpec) -> np.ndarray:
    from scipy.linalg import eigh

    w = _as_numpy(spec.tensor)
    mats = _slices(w[None], spec.kind)[0] if spec.kind == "conv2d" else w[None]
    evs = []
    for a in mats:
        gram = a.T @ a if a.shape[0] >= a.shape[1] else a @ a.T
        evs.append(eigh(gram, eigvals_only=True, driver="ev", overwrite_a=True, check_finite=False))
    ev = np.clip(np.concatenate(evs), 0.0, None)
    if spec.kind == "conv2d":
        ev *= CONV2D_SCALE
    return np.sort(ev)


def _torch_solver(device: str):
    import torch

    dev = torch.device(device)

    def solve(chunk: list[LayerSpec]) -> list[np.ndarray]:
        with torch.no_grad():
            mats = torch.stack([_as_torch(s.tensor, torch).to(dev, torch.float64) for s in chunk])
            mats = _slices(mats, chunk[0].kind)
            gram = mats.mT @ mats if mats.shape[-2] >= mats.shape[-1] else mats @ mats.mT
            ev = torch.linalg.eigvalsh(gram).clamp_min_(0.0).cpu().numpy()
        return _pool(ev, chunk)

    return solve


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


def _as_numpy(tensor: Any) -> np.ndarray:
    if hasattr(tensor, "detach"):  # torch
        tensor = tensor.detach().cpu()
        if not tensor.dtype.is_floating_point or tensor.dtype.itemsize < 4:  # bf16/fp16 have no numpy view
            tensor = tensor.double()
        tensor = tensor.numpy()
    return np.asarray(tensor, dtype=np.float64)


def _as_torch(tensor: Any, torch: Any) -> Any:
    if isinstance(tensor, torch.Tensor):
        return tensor.detach()
    return torch.from_numpy(np.asarray(tensor))
