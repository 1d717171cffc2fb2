"""The ``fast`` engine: Gram matrix + symmetric eigensolver, batched, float64.

For an ``N x M`` layer (``N >= M``) the eigenvalues of ``W^T W`` are the squared
singular values weightwatcher gets from a full float64 SVD; forming the ``M x M`` Gram
(one SYRK) and calling ``eigvalsh`` is several times cheaper than ``gesdd``. Both
steps run in float64. CPU: numpy's ``a.T @ a`` and LAPACK ``syevd`` (two-stage
``syevd_2stage`` from ``TWO_STAGE_MIN`` up), one layer per thread when ``threads``
allows. CUDA (when ``device`` resolves to it): layers of one shape stacked into one
batched torch ``bmm`` + ``eigvalsh`` (not exercised by the test suite on CPU-only
machines; the same torch code runs there on CPU). Small eigenvalues of a Gram are
only accurate to ``eps * lambda_max`` absolutely; they sit far below the power-law
tail and below weightwatcher's 1e-5 cut-off, so the fit does not see the difference.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

import numpy as np

from .layers import CONV2D_SCALE, LayerSpec
from .result import LayerResult, layer_metrics

BATCH_BYTES = 256 << 20  # float64 bytes of weights per batched call
# From this Gram size up LAPACK's two-stage tridiagonal reduction (dense -> band in
# BLAS3, then band -> tridiagonal) beats the one-stage dsytrd, whose half of BLAS2
# flops dominate once the matrix is far out of cache: 1.6x at n = 3072 on the
# development VM; at n = 768 and 1024 it is 1.4x slower, so those keep syevd.
TWO_STAGE_MIN = 2048
PARALLEL_BYTES = 4 << 30  # float64 working set of the layers analysed at once (CPU threads)


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
    if specs:  # each thread holds a float64 copy of its layer and a Gram: bound the sum
        n = min(n, max(1, PARALLEL_BYTES // max(_float64_bytes(spec) for spec in specs)))
    if n <= 1:
        return [fn(spec) for spec in specs]
    import contextlib
    from concurrent.futures import ThreadPoolExecutor

    try:
        from threadpoolctl import threadpool_limits

        one_blas_thread: Any = threadpool_limits(limits=1, user_api="blas")
    except ImportError:
        one_blas_thread = contextlib.nullcontext()
    order = sorted(range(len(specs)), key=lambda i: -_cost(specs[i]))
    out: list[Any] = [None] * len(specs)
    # numpy releases the GIL inside BLAS/LAPACK; each call runs on its caller's thread.
    with one_blas_thread, ThreadPoolExecutor(n, thread_name_prefix="wtwin-fast") as pool:
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


def _float64_bytes(spec: LayerSpec) -> int:
    return 8 * spec.rf * spec.m * (spec.n + spec.m)


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
        evs.append(_eigvalsh(gram))
    ev = evs[0] if len(evs) == 1 else np.sort(np.concatenate(evs))
    np.clip(ev, 0.0, None, out=ev)
    if spec.kind == "conv2d":
        ev *= CONV2D_SCALE
    return ev


def _eigvalsh(gram: np.ndarray) -> np.ndarray:
    """Ascending eigenvalues of a symmetric float64 matrix we own (it may be overwritten)."""
    if gram.shape[0] >= TWO_STAGE_MIN:
        solve = _two_stage_solver()
        if solve is not None:
            return solve(gram)
    return np.linalg.eigvalsh(gram)  # syevd, values only


@functools.lru_cache(maxsize=1)
def _two_stage_solver() -> Callable[[np.ndarray], np.ndarray] | None:
    """``LAPACKE_dsyevd_2stage`` from the OpenBLAS numpy loaded, via ctypes; None when
    it is not there (another BLAS, no threadpoolctl): callers fall back to syevd."""
    try:
        import ctypes

        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    for info in threadpool_info():
        if info.get("internal_api") != "openblas":
            continue
        try:
            lib = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        for name, int_t in (("scipy_LAPACKE_dsyevd_2stage64_", ctypes.c_int64), ("LAPACKE_dsyevd_2stage64_", ctypes.c_int64),
                            ("scipy_LAPACKE_dsyevd_2stage", ctypes.c_int32), ("LAPACKE_dsyevd_2stage", ctypes.c_int32)):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = int_t
                fn.argtypes = [ctypes.c_int, ctypes.c_char, ctypes.c_char, int_t, ctypes.c_void_p, int_t, ctypes.c_void_p]
                return functools.partial(_call_two_stage, fn)
    return None


def _call_two_stage(fn: Any, gram: np.ndarray) -> np.ndarray:
    a = np.require(gram, np.float64, ["C", "W"])  # symmetric: its C buffer is its column-major buffer too
    n = a.shape[0]
    w = np.empty(n, dtype=np.float64)
    info = fn(102, b"N", b"L", n, a.ctypes.data, n, w.ctypes.data)  # LAPACK_COL_MAJOR, values only, lower
    if info != 0:
        raise np.linalg.LinAlgError(f"dsyevd_2stage failed (info={info})")
    return w


def _torch_solver(device: str):
    import torch

    dev = torch.device(device)

    def solve(chunk: list[LayerSpec]) -> list[np.ndarray]:
        with torch.no_grad():
            # to the device in the stored dtype (half the bytes of float64 over PCIe), upcast there
            mats = torch.stack([_as_torch(s.tensor, torch).to(dev).to(torch.float64) for s in chunk])
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
