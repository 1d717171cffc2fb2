"""`ReferenceCurve`: one reference run's history for `wtwin.detect.reference`, read once.

Pure Python (built once per reference, not per update): the points sorted by step (a
rewound step replaces the history after it, as a resumed run's log does), non-finite
losses dropped, and per half-life the EWMA level the live run's level is compared with.
"""

from __future__ import annotations

import math

from .errors import ConfigError

NAN = math.nan
GAP = 4.0          # a gap weighs at most 4 usual gaps (base.gap_decay)
# a reference whose level fell this many times over (two decades: a physics-informed net's
# 38 -> 1e-4) is compared on ln(loss): a sibling stuck at 0.31 is 1% of such a curve's
# progress in loss units, and 58% of it in decades (reference.py)
LOG_SPAN = 100.0
MAD = 1.2533       # sd / mean |x| of a normal
isfinite = math.isfinite


def _floats(name: str, what: str, xs, n: int) -> list:
    out = [float(x) for x in xs]
    if len(out) != n:
        raise ConfigError(f"reference {name!r}: {what} has {len(out)} values, steps has {n}")
    return out


class ReferenceCurve:
    """One reference run's history, immutable: its points sorted by step (a rewound
    step replaces the history after it, as a resumed run's log does), non-finite losses
    dropped, and its level (EWMA, ``halflife`` steps) computed once per half-life."""

    def __init__(self, name: str, steps, losses, lrs=None, tokens=None) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a reference needs a name, got {name!r}")
        st = [int(s) for s in steps]
        n = len(st)
        lo = _floats(name, "losses", losses, n)
        lr = _floats(name, "lrs", lrs, n) if lrs is not None else [NAN] * n
        tk = _floats(name, "tokens", tokens, n) if tokens is not None else [NAN] * n
        keep: list = []
        for p in zip(st, lo, lr, tk):
            if not isfinite(p[1]):
                continue
            while keep and keep[-1][0] >= p[0]:      # a rewind: the later history wins
                keep.pop()
            keep.append(p)
        if len(keep) < 2:
            raise ConfigError(f"reference {name!r} has {len(keep)} finite loss points; it needs 2")
        self.name = name
        self.steps = tuple(p[0] for p in keep)
        self.losses = tuple(p[1] for p in keep)
        self.lrs = tuple(p[2] for p in keep)
        self.tokens = tuple(p[3] for p in keep)
        self.has_lr = any(isfinite(x) for x in self.lrs)
        self.has_tokens = all(isfinite(x) for x in self.tokens) and all(
            b > a for a, b in zip(self.tokens, self.tokens[1:]))
        self._levels: dict = {}
        self._logged: ReferenceCurve | None = None

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return f"ReferenceCurve({self.name!r}, {len(self)} points, steps {self.steps[0]}..{self.steps[-1]})"

    def spans_decades(self, halflife: float, start_points: int = 10) -> bool:
        """Every loss > 0, and the level fell ``LOG_SPAN`` times over: from the start (its
        highest loss among the first ``start_points``) to its lowest level."""
        if min(self.losses) <= 0.0:
            return False
        lv, _noise, start = self.levels(halflife, start_points)
        return start >= LOG_SPAN * min(lv)

    def logged(self) -> "ReferenceCurve":
        """The same curve on ln(loss) (every loss > 0; ``spans_decades``): built once."""
        if self._logged is None:
            self._logged = ReferenceCurve(self.name, self.steps, [math.log(v) for v in self.losses],
                                          self.lrs, self.tokens)
        return self._logged

    def levels(self, halflife: float, start_points: int = 10) -> tuple:
        """(levels, level noise sd, start) at this half-life: cached, computed once."""
        key = (halflife, start_points)
        if key not in self._levels:
            self._levels[key] = _levels(self.steps, self.losses, halflife, start_points)
        return self._levels[key]


def _levels(steps, losses, halflife: float, start_points: int) -> tuple:
    """The EWMA level at each point (weights as `base.gap_decay`), the level's noise sd
    (the median point scatter, at the level's time scale) and the start."""
    out, dt, lev = [], 1.0, losses[0]
    diffs = sorted(abs(b - a) for a, b in zip(losses, losses[1:]))
    scatter = diffs[len(diffs) // 2] * MAD / math.sqrt(2.0)
    for i, x in enumerate(losses):
        if i:
            gap = steps[i] - steps[i - 1]
            dt = 0.9 * dt + 0.1 * gap if i > 1 else float(gap)
            a = 0.5 ** (min(gap, GAP * dt) / halflife)
            lev = a * lev + (1.0 - a) * x
        out.append(lev)
    a = 0.5 ** (dt / halflife)
    noise = scatter * math.sqrt((1.0 - a) / (1.0 + a))
    return tuple(out), noise, max(losses[:start_points])
