"""WW-PGD, corrected: spectral projection of weight matrices toward a power-law tail.

``project_weight(weight, kind)`` is one projection; the daemon's projection jobs
(``jobs/project.py``) and the trainer's optimizer wrapper (``wtwin.emitters.wwpgd.WWPGD``,
at epoch ends, strength from ``ramp``) both run it. It reshapes a layer's spectrum:

1. **Measure** as weightwatcher does: eigenvalues ``lambda = s^2`` of the weight
   (Conv2d: the ``kh*kw`` kernel-position slices pooled with the ``sqrt(1/2)`` slice
   scale, so ``lambda = s^2 / 2``), power-law fit (``fit_tail``) -> ``xmin``; the tail
   is the ``k`` eigenvalues at or above ``xmin``.
2. **Target** ``lambda*_i = A i^-q`` for ranks ``i = 1..k`` (``q = 1`` is alpha = 2),
   ``log A`` the least-squares fit with slope ``-q`` (the mean of ``log lambda_i + q log i``).
3. **Step** with ``g = log lambda - log lambda*``: ``lambda <- lambda * cayley_factor(g,
   eta)`` with factor ``exp(-2 eta g / (1 + 2 eta))``. That is the implicit (proximal)
   step on ``g^2/2``; to first order it is upstream's ``(1 - eta g)/(1 + eta g)``, but it
   is positive for every ``eta`` and ``g``, never overshoots (``g`` shrinks by ``1 + 2 eta``)
   where upstream's ratio changes sign once ``eta |g| > 1``.
4. **Blend** singular values ``s <- (1 - beta_t) s + beta_t s_shaped`` (same singular
   vectors, so this equals blending the matrices), ``beta_t`` = 0 during warm-up, then
   a linear ramp to ``beta``.
5. **Retract** the tail: ``erg="enforce"`` scales it so the ERG condition holds, the
   tail trace-log ``sum_tail log(lambda n / sum(lambda)) = 0`` in weightwatcher's detX
   units (eigenvalues rescaled to mean 1); ``erg="preserve"`` keeps the tail
   log-determinant where it was (upstream's behaviour, the default: see docs/WWPGD.md
   for why enforcing is opt-in); ``erg="off"`` does neither.
6. **Rebuild** ``W + U diag(s_new - s) V^T`` in float64 (the same measurement units
   both ways, Conv2d included) and cast back to the parameter's dtype (bf16/fp16 work).

It lives on the trainer's side, which owns it: the ``WWPGD`` optimizer (``wwpgd.py``)
and the daemon's projection jobs (``daemon/jobs/project.py``) both run it. This module
imports torch; ``wtwin.emitters`` itself never imports it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

EVALS_THRESH = 1e-5
CONV2D_SCALE = 0.5
ERG_MODES = ("enforce", "preserve", "off")


def cayley_factor(g: torch.Tensor, eta: float) -> torch.Tensor:
    """Multiplier of lambda for log-gap ``g``: in (0, inf) for every eta >= 0."""
    return torch.exp(-2.0 * eta * g / (1.0 + 2.0 * eta))


def upstream_cayley_factor(g: torch.Tensor, eta: float) -> torch.Tensor:
    """Upstream's ratio (for comparison only): negative once eta * |g| > 1."""
    return (1.0 - eta * g) / (1.0 + eta * g)


def fit_tail(evals: torch.Tensor) -> tuple[float, float, int] | None:
    """(alpha, xmin, num_pl_spikes) of weightwatcher's power-law fit, or None if it fails.

    Fitted on the CPU whatever the weight's device: the scan reads one value per candidate
    ``xmin`` (a device sync each on a GPU) and the vector is one layer's eigenvalues."""
    evals = evals.detach().to("cpu", torch.float64).flatten()
    data = torch.sort(evals[evals > EVALS_THRESH]).values
    n_all = data.numel()
    if n_all < 2:
        return None
    logs = torch.log(data)
    suffix = torch.flip(torch.cumsum(torch.flip(logs, [0]), 0), [0])
    n = (n_all - torch.arange(n_all - 1, dtype=torch.float64))
    if n_all < 20:  # weightwatcher's small-n branch: bias-corrected, tails >= 8
        s = suffix[:-1] - n * logs[:-1]
        valid = (n >= 8) & (s > 1e-12)
        alphas = torch.where(valid, 1.0 + (n - 1.0) / s, torch.zeros_like(s))
    else:
        alphas = 1.0 + n / (suffix[:-1] - n * logs[:-1])
        valid = torch.ones_like(alphas, dtype=torch.bool)
    ds = torch.ones_like(alphas)
    for i in range(n_all - 1):
        a = float(alphas[i])
        if valid[i] and a > 1.0:
            tail = logs[i:] - logs[i]
            emp = torch.arange(n_all - i, dtype=torch.float64) / (n_all - i)
            ds[i] = torch.max(torch.abs(1.0 - torch.exp((1.0 - a) * tail) - emp))
    i = int(torch.argmin(ds))
    alpha = float(alphas[i])
    if not math.isfinite(alpha) or alpha <= 0:
        return None
    xmin = float(data[i])
    return alpha, xmin, int((evals >= xmin).sum())


def project_weight(weight: torch.Tensor, kind: str, *, q: float = 1.0, eta: float = 0.5, beta: float = 1.0,
                   erg: str = "preserve") -> tuple[torch.Tensor, dict[str, Any]]:
    """One WW-PGD projection of ``weight`` (``kind``: dense | conv2d); returns (new, report)."""
    if erg not in ERG_MODES:
        raise ValueError(f"erg must be one of {ERG_MODES}, got {erg!r}")
    x, scale = _stack(weight.detach().to(torch.float64), kind)
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    lam = (scale * s * s).flatten()
    fit = fit_tail(lam)
    if fit is None or fit[2] < 2 or beta <= 0:
        return weight, {"projected": False, "alpha_before": fit[0] if fit else -1.0}
    alpha, xmin, k = fit
    order = torch.argsort(lam, descending=True)[:k]
    new_lam = lam.clone()
    new_lam[order] = _step(lam[order], q, eta)
    s_new = (1.0 - beta) * s + beta * torch.sqrt(new_lam.view_as(s) / scale)
    lam_new = (scale * s_new * s_new).flatten()
    lam_new = _retract(lam_new, lam, order, erg)
    s_new = torch.sqrt(lam_new.view_as(s) / scale)
    x_new = x + u @ torch.diag_embed(s_new - s) @ vh
    out = _unstack(x_new, weight.shape, kind).to(weight.dtype)
    after = fit_tail(lam_new)
    return out, {"projected": True, "alpha_before": alpha, "alpha_after": after[0] if after else -1.0,
                 "num_pl_spikes": k, "xmin": xmin, "erg_trace_log": tail_trace_log(lam_new, order)}


def tail_trace_log(lam: torch.Tensor, tail: torch.Tensor) -> float:
    """sum over ``tail`` of log(lambda * n / sum(lambda)): 0 is the ERG condition."""
    lam = lam.flatten()
    return float(torch.sum(torch.log(lam[tail] * (lam.numel() / lam.sum()))))


def _step(tail: torch.Tensor, q: float, eta: float) -> torch.Tensor:
    """Move the descending tail toward A i^-q; ``A`` fitted with the slope fixed."""
    ranks = torch.arange(1, tail.numel() + 1, dtype=torch.float64, device=tail.device)
    log_lam = torch.log(tail)
    log_a = torch.mean(log_lam + q * torch.log(ranks))
    g = log_lam - (log_a - q * torch.log(ranks))
    return tail * cayley_factor(g, eta)


def _retract(lam_new: torch.Tensor, lam_old: torch.Tensor, tail: torch.Tensor, erg: str) -> torch.Tensor:
    if erg == "off":
        return lam_new
    t = lam_new[tail]
    if erg == "preserve":
        c = math.exp(float(torch.mean(torch.log(lam_old[tail])) - torch.mean(torch.log(t))))
    else:  # enforce: k log(c G n / (B + c T)) = 0  =>  c = B / (G n - T)
        bulk = float(lam_new.sum() - t.sum())
        geo = math.exp(float(torch.mean(torch.log(t))))
        denom = geo * lam_new.numel() - float(t.sum())
        if bulk <= 0 or denom <= 0:
            return lam_new  # infeasible: the tail alone cannot reach trace-log 0
        c = bulk / denom
    out = lam_new.clone()
    out[tail] = t * c
    return out


def _stack(w: torch.Tensor, kind: str) -> tuple[torch.Tensor, float]:
    if kind == "conv2d":
        o, i, kh, kw = w.shape
        return w.permute(2, 3, 0, 1).reshape(kh * kw, o, i), CONV2D_SCALE
    return w.reshape(1, *w.shape), 1.0


def _unstack(x: torch.Tensor, shape: torch.Size, kind: str) -> torch.Tensor:
    if kind == "conv2d":
        o, i, kh, kw = shape
        return x.reshape(kh, kw, o, i).permute(2, 3, 0, 1).contiguous()
    return x.reshape(shape)


def kind_of(param: torch.Tensor) -> str | None:
    """dense for 2-D, conv2d for 4-D weights; None for what WW-PGD leaves alone."""
    return {2: "dense", 4: "conv2d"}.get(param.dim())


def ramp(epoch: int, num_epochs: int, *, beta: float, warmup: float, ramp_frac: float) -> float:
    """Blend strength after ``epoch`` (0-based) of ``num_epochs``: 0, then linear to beta."""
    done = epoch + 1
    start = warmup * num_epochs
    if done <= start:
        return 0.0
    return beta * min(1.0, (done - start) / max(1.0, ramp_frac * num_epochs))
