"""`LossBuffer`: read training losses without a device sync on every step.

A loss that is a tensor (on GPU, say) is kept as a detached reference; every ``every``
steps the buffered tensors are stacked and read in one transfer (``tolist()``: one sync
per ``every`` steps instead of one ``.item()`` per step). Python floats pass through.
No framework is imported here: torch is imported only when there are tensors to read.
"""

from __future__ import annotations


class LossBuffer:
    def __init__(self, every: int = 10) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"log_every must be an int >= 1, got {every!r}")
        self.every = every
        self.reads = 0            # device reads done (one per flush with tensors)
        self._items: list[tuple] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, step: int, loss, lr=None, grad_norm=None) -> list[tuple]:
        """Buffer one step; returns the flushed ``(step, loss, lr, grad_norm)`` floats, if due."""
        if hasattr(loss, "detach"):
            loss = loss.detach()
            if loss.numel() != 1:
                loss = loss.float().mean()
        self._items.append((step, loss, lr, grad_norm))
        return self.flush() if len(self._items) >= self.every else []

    def flush(self) -> list[tuple]:
        items, self._items = self._items, []
        if not items:
            return []
        values = [it[1] for it in items]
        norms = [it[3] for it in items]
        idx = [i for i, v in enumerate(values) if hasattr(v, "detach")]
        gdx = [i for i, g in enumerate(norms) if hasattr(g, "detach")]  # grad norms as tensors
        if idx or gdx:
            import torch

            device = (values[idx[0]] if idx else norms[gdx[0]]).device
            read = torch.stack([values[i].reshape(()).float() for i in idx]
                               + [norms[i].reshape(()).float().to(device) for i in gdx]).tolist()
            self.reads += 1
            for i, v in zip(idx, read[:len(idx)]):
                values[i] = v
            for i, g in zip(gdx, read[len(idx):]):
                norms[i] = g
        return [(int(s), float(v), _f(lr), _f(gn))
                for (s, _, lr, _g), v, gn in zip(items, values, norms)]


def _f(x):
    return None if x is None else float(x)
