"""``WWPGD``: the trainer's optimizer wrapper that applies WW-PGD at epoch ends.

``WWPGD(model_or_params, base_optimizer)`` *is* a ``torch.optim.Optimizer``: ``step``
is the base optimizer's step (it shares its ``param_groups`` and ``state``, so LR
schedulers and ``state_dict``/``load_state_dict`` work), and ``project(epoch,
num_epochs)``, called at epoch ends, projects each target weight with the maths the
daemon's projection jobs run (``wtwin.emitters.projection``, docs/WWPGD.md).

This module imports torch; ``wtwin.emitters`` never imports it (see emitters/torch.py).
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from .projection import ERG_MODES, kind_of, project_weight, ramp

_SUPPORTED = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.Embedding)


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
