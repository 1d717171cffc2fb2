"""WW-PGD, corrected: spectral projection of weight matrices toward a power-law tail.

``WWPGD(model_or_params, base_optimizer)`` *is* a ``torch.optim.Optimizer``: ``step``
is the base optimizer's step (it shares its ``param_groups`` and ``state``, so LR
schedulers and ``state_dict``/``load_state_dict`` work), and ``project(epoch,
num_epochs)``, called at epoch ends, reshapes each layer's spectrum:

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

This module imports torch; ``wtwin.emitters`` never imports it (see emitters/torch.py).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch

EVALS_THRESH = 1e-5
CONV2D_SCALE = 0.5
ERG_MODES = ("enforce", "preserve", "off")
_SUPPORTED = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Embedding)


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


class WWPGD(torch.optim.Optimizer):
    """A base optimizer plus WW-PGD projection at epoch ends (see the module docstring).

    ``model_or_params``: a module (its Linear/Conv2d/Embedding weights are projected)
    or an iterable of tensors (2-D dense, 4-D conv2d). ``min_dim`` skips matrices
    whose smaller side is below it (too few eigenvalues for a fit).
    """

    def __init__(self, model_or_params: torch.nn.Module | Iterable[torch.Tensor], base_optimizer: torch.optim.Optimizer,
                 *, q: float = 1.0, eta: float = 0.5, beta: float = 0.5, warmup: float = 0.1, ramp: float = 0.2,
                 erg: str = "preserve", min_dim: int = 8) -> None:
        if not isinstance(base_optimizer, torch.optim.Optimizer):
            raise TypeError("base_optimizer must be a torch.optim.Optimizer")
        if erg not in ERG_MODES or not (q > 0 and eta > 0 and 0 <= beta <= 1 and warmup >= 0 and ramp >= 0):
            raise ValueError("WWPGD needs q > 0, eta > 0, 0 <= beta <= 1, warmup/ramp >= 0, erg in " + str(ERG_MODES))
        self.base_optimizer = base_optimizer
        self.q, self.eta, self.beta, self.warmup, self.ramp, self.erg = q, eta, beta, warmup, ramp, erg
        self.targets = _targets(model_or_params, min_dim)
        super().__init__(base_optimizer.param_groups, dict(base_optimizer.defaults))
        self.param_groups = base_optimizer.param_groups
        self.state = base_optimizer.state
        self.projections = 0
        self.history: list[dict[str, Any]] = []

    def step(self, closure=None):  # noqa: D102 (the base optimizer's step)
        return self.base_optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base_optimizer.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def project(self, epoch: int, num_epochs: int) -> dict[str, dict[str, Any]]:
        """Project every target weight in place; returns a per-layer report."""
        strength = ramp(epoch, num_epochs, beta=self.beta, warmup=self.warmup, ramp_frac=self.ramp)
        report: dict[str, dict[str, Any]] = {}
        if strength <= 0:
            return report
        for name, param, kind in self.targets:
            new, info = project_weight(param.data, kind, q=self.q, eta=self.eta, beta=strength, erg=self.erg)
            if info["projected"]:
                param.data.copy_(new)
            report[name] = {**info, "strength": strength}
        self.projections += 1
        self.history.append({"epoch": epoch, "alpha": {n: r["alpha_before"] for n, r in report.items()}})
        del self.history[:-100]
        return report

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base_optimizer.state_dict(),
                "wwpgd": {"projections": self.projections, "history": list(self.history)}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base_optimizer.load_state_dict(state_dict["base"])
        self.param_groups = self.base_optimizer.param_groups
        self.state = self.base_optimizer.state
        own = state_dict.get("wwpgd", {})
        self.projections = int(own.get("projections", 0))
        self.history = list(own.get("history", []))


def _targets(model_or_params: Any, min_dim: int) -> list[tuple[str, torch.Tensor, str]]:
    if isinstance(model_or_params, torch.nn.Module):
        found = [(f"{name}.weight" if name else "weight", mod.weight, "conv2d" if isinstance(mod, torch.nn.Conv2d)
                  else "dense") for name, mod in model_or_params.named_modules() if isinstance(mod, _SUPPORTED)]
    else:
        found = [(f"param{i}", p, kind_of(p)) for i, p in enumerate(model_or_params)]
    return [(n, p, k) for n, p, k in found if k is not None and min(p.shape[0], p.shape[1]) >= min_dim]
