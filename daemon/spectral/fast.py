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

from typing import Any, Callable, Iterable

import numpy as np

from .layers import CONV2D_SCALE, LayerSpec
from .result import LayerResult, layer_metrics

BATCH_BYTES = 256 << 20  # float64 bytes of weights per batched call


def analyze_layers(
    specs: Iterable[LayerSpec], *, device: str = "auto", threads: int | None = 1
) -> list[LayerResult]:
    """Metrics for every layer, in the order given.

    ``threads`` (CPU only): layers analysed at once, each with one BLAS thread;
    ``None`` uses as many as BLAS is allowed now (threadpoolctl), so a caller that
    pinned BLAS to N threads gets N layers in parallel instead of one layer on N
    threads (the Gram's eigensolve is memory-bound BLAS2 and scales poorly inside
    one call). 1 (the default) is the plain sequential loop.
    """
    specs = list(specs)
    dev = resolve_device(device)
    if dev == "cpu":
        return _map_layers(lambda spec: layer_metrics(spec, _cpu_eigenvalues(spec)), specs, threads)
    evals = eigenvalues(specs, device=dev)
    return [layer_metrics(spec, evals[spec.name]) for spec in specs]


def eigenvalues(
    specs: list[LayerSpec], *, device: str = "auto", threads: int | None = 1
) -> dict[str, np.ndarray]:
    """Sorted (pooled) eigenvalues per layer name.

    On CPU each matrix goes through numpy's ``a.T @ a`` (which BLAS computes as a
    SYRK: half the flops of a GEMM, and faster than torch's batched GEMM here) and
    LAPACK ``syevd`` (``threads`` as in ``analyze_layers``); on CUDA same-shaped
    layers are stacked into one batched ``bmm`` + ``eigvalsh``.
    """
    dev = resolve_device(device)
    if dev == "cpu":
        return dict(zip((s.name for s in specs), _map_layers(_cpu_eigenvalues, specs, threads)))
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


def _map_layers(fn: Callable[[LayerSpec], Any], specs: list[LayerSpec], threads: int | None) -> list[Any]:
    """``[fn(spec) for spec in specs]``, on up to ``threads`` threads, biggest layers first."""
    n = min(len(specs), _thread_budget() if threads is None else max(1, int(threads)))
    if n <= 1:
        return [fn(spec) for spec in specs]
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    order = sorted(range(len(specs)), key=lambda i: -_cost(specs[i]))
    out: list[Any] = [None] * len(specs)
    # numpy releases the GIL inside BLAS/LAPACK; each call runs on its caller's thread.
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(n, thread_name_prefix="wtwin-fast") as pool:
        for i, res in zip(order, pool.map(lambda i: fn(specs[i]), order)):
            out[i] = res
    return out


def _thread_budget() -> int:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return 1
    blas = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
    return max(1, min(blas)) if blas else 1


def _cost(spec: LayerSpec) -> float:
    """Gram + eigensolve flops, roughly: n m^2 + m^3 per slice."""
    return float(spec.rf) * spec.m * spec.m * (spec.n + spec.m)


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
    w = _as_numpy(spec.tensor)
    mats = _slices(w[None], spec.kind)[0] if spec.kind == "conv2d" else w[None]
    evs = []
    for a in mats:
        gram = a.T @ a if a.shape[0] >= a.shape[1] else a @ a.T  # SYRK on the smaller side
        evs.append(np.linalg.eigvalsh(gram))  # syevd, values only; ascending
    ev = evs[0] if len(evs) == 1 else np.sort(np.concatenate(evs))
    np.clip(ev, 0.0, None, out=ev)
    if spec.kind == "conv2d":
        ev *= CONV2D_SCALE
    return ev


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
