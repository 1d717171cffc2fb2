"""Small, fast, real training runs of our own for the harness's clean set.

MLPs and a small CNN trained with torch on scikit-learn's bundled ``load_digits`` (no
download), with SGD, Adam and AdamW under constant, step, cosine and one-cycle
schedules, seeded. Each logs what an emitter would send: the mini-batch loss and the lr
at every step (no validation loss: 40 epochs on 1,400 digits do overfit, and an
``overfit`` warning there would be true). Healthy by construction; runs like these are
where an earlier version paged a false critical ``divergence``.
"""

from __future__ import annotations

import functools
import math

RUNS = {   # name -> preset (from-scratch training: pretraining)
    "own_mlp_sgd_const_s0": "pretraining",
    "own_mlp_adam_cosine_s1": "pretraining",
    "own_mlp_sgd_step_s2": "pretraining",
    "own_cnn_adam_const_s3": "pretraining",
    "own_mlp_adamw_onecycle_s4": "pretraining",
    "own_cnn_sgd_cosine_s5": "pretraining",
    "own_mlp_adam_const_s6": "pretraining",
}


class OwnLog:
    """The part of `wtwin.offline.logs.TrainingLog` the harness uses."""

    def __init__(self, events: list) -> None:
        self._events = events
        self.n_loss = sum(e[0] == "loss" for e in events)

    def events(self):
        return iter(self._events)


@functools.lru_cache(maxsize=None)
def load(name: str) -> OwnLog:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    _, arch, opt, sched, seed = name.split("_")
    seed = int(seed[1:])
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    X, y = load_digits(return_X_y=True)
    X = torch.tensor(X / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(seed))
    Xtr, ytr = X[perm[:1400]], y[perm[:1400]]
    if arch == "cnn":
        model = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 8, 8)), torch.nn.Conv2d(1, 8, 3),
                                    torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(288, 10))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    epochs, batch = 40, 32
    per_epoch = math.ceil(len(Xtr) / batch)
    total = epochs * per_epoch
    lr0 = {"sgd": 0.05, "adam": 2e-3, "adamw": 3e-3}[opt]
    o = {"sgd": lambda p: torch.optim.SGD(p, lr=lr0, momentum=0.9),
         "adam": lambda p: torch.optim.Adam(p, lr=lr0),
         "adamw": lambda p: torch.optim.AdamW(p, lr=lr0)}[opt](model.parameters())
    s = {"const": lambda: None,
         "step": lambda: torch.optim.lr_scheduler.StepLR(o, step_size=15 * per_epoch, gamma=0.1),
         "cosine": lambda: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total),
         "onecycle": lambda: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=lr0, total_steps=total)}[sched]()
    loss_fn, events, step = torch.nn.CrossEntropyLoss(), [], 0
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = torch.tensor(rng.permutation(len(Xtr)))
        for i in range(0, len(Xtr), batch):
            idx = order[i:i + batch]
            lr = o.param_groups[0]["lr"]
            loss = loss_fn(model(Xtr[idx]), ytr[idx])
            o.zero_grad()
            loss.backward()
            o.step()
            if s is not None:
                s.step()
            step += 1
            events.append(("loss", step, loss.item(), float(lr)))
    return OwnLog(events)
