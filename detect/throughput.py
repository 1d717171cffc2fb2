"""`throughput`: the run's steps (or tokens) take longer than they did, for a while.

A straggler node, a throttled GPU or a data loader that falls behind costs as much as a
diverging loss and leaves the loss curve healthy. The detector measures the time of one
unit of work per logged interval: seconds per step from the events' ``ts`` (or the
trainer's own ``step_time_s``), seconds per token when the trainer sends ``tokens`` (the
count seen so far), and keeps two levels of its logarithm:

- ``base``: where it stood, an EWMA of half-life ``base_halflife`` points, learned after
  ``warmup`` points (compilation and warm-up steps are not the baseline) from the
  intervals no slower than ``ratio ** 0.5`` x it (a slowdown is never learned as normal);
- ``level``: an EWMA of half-life ``halflife`` points, each interval clipped to ``clip``
  x the base, so that one stall (a checkpoint, an eval: 20 s among 0.2 s steps) moves it
  by at most ``ln(clip) / halflife``-ish and a periodic one stays a minority of intervals.

It is ``active`` once the level stood over ``ratio`` x the base (and most recent
intervals did: the slow ``share``, an EWMA of "this interval was over ``ratio`` x",
above one half) for ``hold_s`` seconds of the run's time and ``hold_points`` points; it
clears when the level is back under ``sqrt(ratio)`` x the base. A resume (the step went
back), a reset of ``tokens`` and a change of the trainer's announced ``phase`` (a batch or
sequence-length ramp) start the warm-up over, with a new base.

With ``data_wait_s`` (the time a step waited for its data), the share of the step spent
waiting is kept the same way: a slowdown whose extra time is mostly that wait names the
data loader as its likely cause (`message`).

>>> det = ThroughputDetector()
>>> first = None
>>> for t in range(1, 3001):
...     dt = 0.2 if t < 2000 else 0.3            # 1.5x slower from step 2,000
...     stall = 20.0 if t % 500 == 0 else 0.0    # a 20 s checkpoint every 500 steps
...     ts = t * 0.2 + max(0, t - 2000) * 0.1 + (t // 500) * 20.0
...     if det.update(t, 1.0, ts=ts).active and first is None:
...         first = t
>>> first
2547
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (throughput.pxd)
    from math import exp, isfinite, log

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, positive, register
from .finding import Verdict

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
_new = tuple.__new__


class ThroughputState(NamedTuple):
    step: int
    active: bool
    slowdown: float       # level over base (1.0 before a base)


def _dur(s: float) -> str:
    """A duration in plain words: 40 s, 15 min, 2 h 10 min."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


@cython.cclass
class ThroughputDetector(Detector):
    """``see`` leaves ``active``; `verdict` and `message` say how much slower, since when."""

    name = "throughput"
    FEED, KIND = "first", "throughput"
    ARGS = ("ratio", "halflife", "base_halflife", "clip", "warmup", "hold_s", "hold_points")
    STATE = ("_s", "_ts", "_tok", "_phase", "_n", "_base", "_level", "_share", "_wait",
             "_wait_base", "_onset", "_onset_ts", "_on_n", "_base_from", "_base_to", "_tps",
             "_on", "_gpus")
    OPTIONAL = ("_s", "_ts", "_tok", "_phase", "_base", "_level", "_wait", "_wait_base",
                "_onset", "_onset_ts", "_base_from", "_base_to", "_tps", "_gpus")

    def __init__(self, *, ratio: float = 1.3, halflife: float = 10.0,
                 base_halflife: float = 200.0, clip: float = 3.0, warmup: int = 20,
                 hold_s: float = 180.0, hold_points: int = 10) -> None:
        for n, v in (("halflife", halflife), ("base_halflife", base_halflife),
                     ("hold_s", hold_s)):
            positive(n, v)
        check(ratio > 1.0, "ratio", ratio, "> 1 (times the base step time)")
        check(clip > ratio, "clip", clip, "> ratio")
        check(isinstance(warmup, int) and warmup >= 1, "warmup", warmup, "an int >= 1 (points)")
        check(isinstance(hold_points, int) and hold_points >= 1, "hold_points", hold_points,
              "an int >= 1 (points)")
        self.ratio, self.halflife, self.base_halflife, self.clip = ratio, halflife, base_halflife, clip
        self.warmup, self.hold_s, self.hold_points = warmup, hold_s, hold_points
        self._c_lr = log(ratio)
        self._c_back = 0.5 * log(ratio)
        self._c_clip = log(clip)
        self._c_fast = 0.5 ** (1.0 / halflife)
        self._c_slow = 0.5 ** (1.0 / base_halflife)
        self._c_warmup = warmup
        self._c_hold_points = hold_points
        self._c_hold_s = hold_s
        self._reset()
        self._s = NO_STEP
        self._phase = NO_STEP
        self._gpus = NO_STEP
        self._on = False
        self.active = False

    def _reset(self) -> None:
        """Forget the base: warm up again (a resume, a new phase, a tokens reset)."""
        self._ts = self._tok = NAN
        self._n = 0
        self._base = self._level = self._wait = self._wait_base = NAN
        self._share = 0.0
        self._onset = NO_STEP
        self._onset_ts = NAN
        self._on_n = 0
        self._base_from = self._base_to = NO_STEP
        self._tps = NAN

    def see(self, p) -> None:
        if p.from_step != NO_STEP:          # a resume: the wall gap and restart are no slowdown
            self._reset()
            self._on = self.active = False
        if p.timed:
            if p.gpus != NO_STEP:
                self._gpus = p.gpus
            if p.phase != NO_STEP and p.phase != self._phase:
                if self._phase != NO_STEP:
                    self._reset()
                    self._on = self.active = False
                self._phase = p.phase
        self._observe(p.s, p.ts, p.step_time, p.tokens, p.data_wait)

    def observe(self, step: int, ts: float, step_time: float, tokens: float,
                data_wait: float) -> None:
        """One logged point; NaN where a value was not sent."""
        self._observe(step, ts, step_time, tokens, data_wait)

    @cython.locals(ds=cython.longlong, dt=cython.double, u=cython.double, x=cython.double,
                   hi=cython.double, w=cython.double, slow=cython.bint)
    def _observe(self, step: int, ts: float, step_time: float, tokens: float,
                 data_wait: float) -> int:
        ds = step - self._s if self._s != NO_STEP else 0
        if ds <= 0:
            if ds < 0:
                self._reset()
            self._s = step
            self._ts, self._tok = ts, tokens
            return 0
        self._s = step
        if step_time == step_time:
            dt = step_time * ds             # the trainer's own time: per step, over ds steps
        elif ts == ts and self._ts == self._ts:
            dt = ts - self._ts
        else:
            self._ts, self._tok = ts, tokens
            return 0
        u = dt / ds
        if tokens == tokens and self._tok == self._tok:
            if tokens <= self._tok:         # the count went back: a restart of it
                self._reset()
                self._ts, self._tok = ts, tokens
                return 0
            u = dt / (tokens - self._tok)
        self._ts, self._tok = ts, tokens
        if not (u > 0.0 and isfinite(u)):
            return 0
        self._n += 1
        if self._n <= self._c_warmup:
            return 0
        x = log(u)
        if data_wait == data_wait and step_time != step_time:
            w = data_wait / (dt / ds) if dt > 0.0 else 0.0
        elif data_wait == data_wait:
            w = data_wait / step_time if step_time > 0.0 else 0.0
        else:
            w = NAN
        if self._base != self._base:
            self._base = self._level = x
            self._wait = self._wait_base = w
            self._base_from = step - ds
            self._base_to = step
            return 0
        hi = self._base + self._c_clip
        if x > hi:
            x = hi
        self._level = self._c_fast * self._level + (1.0 - self._c_fast) * x
        slow = x > self._base + self._c_lr
        self._share = self._c_fast * self._share + (1.0 - self._c_fast) * slow
        if w == w:
            if self._wait != self._wait:
                self._wait = self._wait_base = w
            self._wait = self._c_fast * self._wait + (1.0 - self._c_fast) * w
        if x < self._base + self._c_back and not self._on and self._onset == NO_STEP:
            self._base = self._c_slow * self._base + (1.0 - self._c_slow) * x
            self._base_to = step
            if w == w:
                self._wait_base = self._c_slow * self._wait_base + (1.0 - self._c_slow) * w
        self._judge(step, ts)

    def _judge(self, step: int, ts: float) -> None:
        if self._level > self._base + self._c_lr and self._share > 0.5:
            if self._onset == NO_STEP:
                self._onset, self._onset_ts, self._on_n = step, ts, self._n
            if (not self._on and self._n - self._on_n >= self._c_hold_points
                    and (ts != ts or self._onset_ts != self._onset_ts
                         or ts - self._onset_ts >= self._c_hold_s)):
                self._on = True
        elif self._level < self._base + self._c_back:
            self._onset = NO_STEP
            self._onset_ts = NAN
            self._on = False
        elif not self._on:
            self._onset = NO_STEP
            self._onset_ts = NAN
        self._tps = ts
        self.active = self._on

    def asks(self) -> bool:
        return self.active

    @property
    def based(self) -> bool:
        """Has it a baseline (after its warm-up)?"""
        return self._base == self._base

    @property
    def slowdown(self) -> float:
        """The level over the base (1.0 before a base)."""
        return exp(self._level - self._base) if self._base == self._base else 1.0

    @property
    def starved(self) -> bool:
        """Is the data wait's rise most of the slowdown (the data loader's fault)?"""
        if self._wait != self._wait or self._base != self._base:
            return False
        r = self.slowdown
        # the waited share of the step, in base steps: now wait * r, before wait_base
        return r > 1.0 and (self._wait * r - self._wait_base) >= 0.5 * (r - 1.0)

    def verdict(self) -> Verdict:
        """Steps take ``ratio`` x longer than they did, held for ``hold_s`` (warning)."""
        return Verdict("throughput", self.active, "warning", scale=self.halflife,
                       onset=self._onset if self._onset != NO_STEP else None,
                       facts={"slowdown": self.slowdown, "starved": self.starved})

    def message(self, step: int, loss: float) -> str:
        r = self.slowdown
        now, was = exp(self._level), exp(self._base)
        per = "token" if self._tok == self._tok else "step"
        if per == "token":
            what = f"throughput {1 / now:,.0f} tokens/s, {r:.2g}x slower than the {1 / was:,.0f} tokens/s"
        else:
            what = f"steps take {now:.3g} s, {r:.2g}x the {was:.3g} s"
        text = f"{what} of steps {self._base_from:,}-{self._base_to:,}"
        if self._onset != NO_STEP:
            text += f", since step {self._onset:,}"
            if self._onset_ts == self._onset_ts and self._tps == self._tps:
                text += f" (for {_dur(self._tps - self._onset_ts)})"
        if self._gpus != NO_STEP and self._gpus > 0:
            text += (f": about {(1.0 - 1.0 / r) * self._gpus:.3g} GPU-hours lost per hour "
                     f"at {self._gpus} GPUs")
        if self.starved:
            text += (f"; likely cause: data starvation (steps wait {self._wait:.0%} of their "
                     f"time for data, {self._wait_base:.0%} before)")
        return text

    def update(self, step: int, loss: float, ts: float | None = None,
               step_time: float | None = None, tokens: float | None = None,
               data_wait: float | None = None) -> ThroughputState:
        self.observe(step, NAN if ts is None else ts, NAN if step_time is None else step_time,
                     NAN if tokens is None else tokens, NAN if data_wait is None else data_wait)
        return _new(ThroughputState, (step, self._on, self.slowdown))


register(ThroughputDetector)
