"""`memory`: the accelerator's memory grows steadily toward its total (an OOM ahead).

A tensor kept per step (a loss appended with its graph, a cache that never evicts) grows
memory a little every hour until the job dies of a CUDA OOM, hours after its last
checkpoint. The trainer sends, every N steps, the allocated and reserved bytes and the
device's total (``mem_allocated``, ``mem_reserved``, ``mem_total``: the callbacks read
``torch.cuda.max_memory_allocated()`` and friends). The detector fits a line to the
larger of the two (reserved, else allocated) against the run's time (``ts``) by weighted
least squares, each point's weight halving every ``halflife`` points (O(1): five running
sums), and extrapolates it: when it reaches ``mem_total`` within ``horizon_s`` seconds it
is ``active``, once the line explains the points (R^2 at least ``r2``: a sawtooth of
allocations freed each step has none), over ``min_span_s`` seconds and ``warmup``
points, for ``patience`` points in a row (as many out of it close it); within a quarter of the horizon it is
critical. A second line that forgets four times faster gives the recent slope: when it is
under the first one's, the growth levels off, and the forecast follows an exponential
approach whose time constant comes from the two slopes' ratio and their ages, so that
fragmentation that plateaus never gets there. Once paging, the first line alone is
followed (the recent slope wobbles with the step rate: no flapping), and the page clears
once its crossing is beyond 1.5x the horizon. A resume (the step went back) starts it over: a new process.
The run's checkpoints (`checkpoint`, the daemon's checkpoint events) are not judged: the
page names the last one, what an OOM would fall back to.

>>> det = MemoryDetector()
>>> first = None
>>> for i in range(1, 400):     # a report every 60 s, 40 GiB + 1 GiB/h, total 48 GiB
...     used = (40 + i / 60) * 2 ** 30
...     if det.update(i * 100, 1.0, ts=60.0 * i, reserved=used, total=48 * 2 ** 30).active:
...         first = i
...         break
>>> first, round(det.eta_s / 3600, 1)
(362, 2.0)
"""

from __future__ import annotations

from typing import NamedTuple

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (memory.pxd)
    from math import isfinite, log

from .base import NAN, NO_STEP as _NO_STEP, Detector, check, positive, register
from .finding import Verdict
from .throughput import _dur

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
_GIB = cython.declare(cython.double, float(2 ** 30))
_new = tuple.__new__


def _about(step: float) -> int:
    """A forecast step to two significant digits (it is a forecast): 41,237 -> 41,000."""
    return int(round(step, 2 - len(str(abs(int(step))))))


class MemoryState(NamedTuple):
    step: int
    active: bool
    eta_s: float          # seconds until the line reaches the total (inf: never)


@cython.cclass
class MemoryDetector(Detector):
    """``see`` leaves ``active``, ``eta_s`` and ``severity``."""

    name = "memory"
    FEED, KIND = "first", "memory"
    ARGS = ("horizon_s", "halflife", "r2", "min_span_s", "warmup", "patience")
    STATE = ("_s", "_t0", "_w", "_st", "_sm", "_stt", "_stm", "_smm", "_fw", "_fst", "_fsm",
             "_fstt", "_fstm", "_n", "_first_ts",
             "_last_ts", "_last_m", "_total", "_kind", "_run", "_on", "_crit", "_s0", "_ts0",
             "_ckpt")
    OPTIONAL = ("_s", "_t0", "_first_ts", "_last_ts", "_last_m", "_total", "_s0", "_ts0",
                "_ckpt")

    def __init__(self, *, horizon_s: float = 7200.0, halflife: float = 60.0, r2: float = 0.8,
                 min_span_s: float = 1800.0, warmup: int = 20, patience: int = 3) -> None:
        for n, v in (("horizon_s", horizon_s), ("halflife", halflife)):
            positive(n, v)
        check(0.0 < r2 < 1.0, "r2", r2, "in (0, 1)")
        check(min_span_s >= 0.0, "min_span_s", min_span_s, ">= 0 (seconds)")
        for n, v in (("warmup", warmup), ("patience", patience)):
            check(isinstance(v, int) and v >= 1, n, v, "an int >= 1 (points)")
        self.horizon_s, self.halflife, self.r2 = horizon_s, halflife, r2
        self.min_span_s, self.warmup, self.patience = min_span_s, warmup, patience
        self._c_k = 0.5 ** (1.0 / halflife)
        self._c_fk = 0.5 ** (4.0 / halflife)
        self._s = NO_STEP
        self._t0 = self._first_ts = self._last_ts = self._last_m = self._total = NAN
        self._s0 = self._ckpt = NO_STEP
        self._ts0 = NAN
        self._w = self._st = self._sm = self._stt = self._stm = self._smm = 0.0
        self._fw = self._fst = self._fsm = self._fstt = self._fstm = 0.0
        self._n = self._run = 0
        self._kind = "reserved"
        self._on = self._crit = False
        self.active = False
        self.eta_s = float("inf")
        self.slope = 0.0

    def see(self, p) -> None:
        if p.from_step != NO_STEP:      # a resume: a new process, new allocations
            ckpt = self._ckpt           # (the checkpoints saved stay saved)
            self.__init__(**self._params())
            self._ckpt = ckpt
        if p.timed and p.ts == p.ts:
            self.observe(p.s, p.ts, p.mem_alloc, p.mem_reserved, p.mem_total)
        else:
            self._s = p.s

    def checkpoint(self, step: int) -> None:
        """A checkpoint was saved at ``step``: the page names the last one."""
        self._ckpt = step

    @cython.locals(m=cython.double, k=cython.double, t=cython.double)
    def observe(self, step: int, ts: float, allocated: float, reserved: float,
                total: float) -> None:
        """One point; NaN where a value was not sent (a point without memory: nothing)."""
        self._s = step
        m = reserved if reserved == reserved else allocated
        if not (m == m and isfinite(ts)):
            return
        if total == total and total > 0.0:
            self._total = total
        self._kind = "reserved" if reserved == reserved else "allocated"
        if self._t0 != self._t0:
            self._t0 = self._first_ts = ts
            self._s0, self._ts0 = step, ts
        t = ts - self._t0
        m = m / _GIB
        k = self._c_k
        self._w = k * self._w + 1.0
        self._st = k * self._st + t
        self._sm = k * self._sm + m
        self._stt = k * self._stt + t * t
        self._stm = k * self._stm + t * m
        self._smm = k * self._smm + m * m
        k = self._c_fk
        self._fw = k * self._fw + 1.0
        self._fst = k * self._fst + t
        self._fsm = k * self._fsm + m
        self._fstt = k * self._fstt + t * t
        self._fstm = k * self._fstm + t * m
        self._n += 1
        self._last_ts, self._last_m = ts, m
        self._judge(t)

    @cython.locals(w=cython.double, vt=cython.double, vm=cython.double, ctm=cython.double,
                   fvt=cython.double, slope=cython.double, fit=cython.double,
                   room=cython.double, fast=cython.double, tau=cython.double,
                   ok=cython.bint)
    def _judge(self, t: float) -> None:
        w = self._w
        vt = self._stt - self._st * self._st / w
        vm = self._smm - self._sm * self._sm / w
        ctm = self._stm - self._st * self._sm / w
        self.eta_s = float("inf")
        self.slope = 0.0
        ok = False
        if (self._n >= self.warmup and vt > 0.0 and vm > 0.0 and self._total == self._total
                and self._last_ts - self._first_ts >= self.min_span_s):
            slope = ctm / vt                         # GiB per second
            fit = self._sm / w + slope * (t - self._st / w)
            fvt = self._fstt - self._fst * self._fst / self._fw
            fast = (self._fstm - self._fst * self._fsm / self._fw) / fvt if fvt > 0.0 else slope
            room = self._total / _GIB - max(fit, self._last_m)
            self.slope = slope
            if slope > 0.0 and ctm * ctm / (vt * vm) >= self.r2:
                # the line's crossing; before a page, one that levels off (the recent slope
                # under the line's) follows an exponential approach, and a page holds on the
                # line (its recent slope wobbles with the step rate: no flapping)
                self.eta_s = max(room, 0.0) / slope
                if fast < slope and not self._on:
                    self.slope = fast
                    self.eta_s = float("inf")
                    if fast > 0.0:
                        tau = (self._fst / self._fw - self._st / w) / log(slope / fast)
                        if room < fast * tau:
                            self.eta_s = -tau * log(1.0 - max(room, 0.0) / (fast * tau))
            ok = self.eta_s <= self.horizon_s or (self._on and self.eta_s <= 1.5 * self.horizon_s)
        # ``patience`` reports in a row open a page, and as many close it
        self._run = self._run + 1 if ok != self._on else 0
        if self._run >= self.patience:
            self._on, self._run = not self._on, 0
        self._crit = self._on and self.eta_s <= 0.25 * self.horizon_s
        self.active = self._on

    def asks(self) -> bool:
        return self.active

    @property
    def severity(self) -> str:
        return "critical" if self._crit else "warning"

    def verdict(self) -> Verdict:
        """The line reaches the device total within the horizon (critical within a quarter)."""
        return Verdict("memory", self.active, self.severity, scale=self.halflife,
                       facts={"eta_s": self.eta_s, "gib_per_h": self.slope * 3600.0})

    def message(self, step: int, loss: float) -> str:
        total = self._total / _GIB if self._total == self._total else 0.0
        text = (f"{self._kind} memory grows {self.slope * 3600.0:.2g} GiB/h "
                f"(now {self._last_m:.3g} GiB): {total:.3g} GiB reached in about "
                f"{_dur(self.eta_s)}")
        if self._s0 != NO_STEP and self._last_ts > self._ts0 and self._s > self._s0:
            rate = (self._s - self._s0) / (self._last_ts - self._ts0)
            text += f" (at step ~{_about(self._s + rate * self.eta_s):,})"
        if self._ckpt != NO_STEP:
            text += f". Last checkpoint: step {self._ckpt:,}"
        return text

    def update(self, step: int, loss: float, ts: float | None = None,
               allocated: float | None = None, reserved: float | None = None,
               total: float | None = None) -> MemoryState:
        if ts is None:
            self._s = step
        else:
            self.observe(step, ts, NAN if allocated is None else allocated,
                         NAN if reserved is None else reserved, NAN if total is None else total)
        return _new(MemoryState, (step, self._on, self.eta_s))


register(MemoryDetector)
