"""`reference`: page when a run falls behind the run(s) it should match.

A self-referential forecast cannot see a run that looks healthy but learns more slowly
than its twin. This compares, at the same step (or tokens, when both runs send them), the
live loss *level* (an EWMA, half-life ``halflife`` steps) with each reference's level
(the same EWMA over its whole history, interpolated: both lag alike, whatever their
logging steps). ``units = gap / progress``, ``progress = start - reference level`` (start:
its highest loss among its first ``start_points``): an offset cancels, a scale changes
both alike. ``noise``: the pair's level noise: each run's point scatter at the level's
time scale, the gap's own wander while the runs agree, several references' spread. When
every reference's level fell two decades or more (``LOG_SPAN``: a physics-informed net's
38 -> 1e-4), all of it is on ln(loss), the live run's losses too: a sibling stuck at 0.31
is 1% of such a curve's progress in loss units and 58% of it on a log scale, while two
clean seeds that wobble x2-x3 on their floor stay within noise; the message then says
the ratio ("0.31 is 800x run-a's 0.00039").

``behind`` (a finding of kind ``behind``, severity ``warning``) when, against *every*
comparable reference, ``units > gate``, the gap is over ``noise_gate`` noises and over
what the reference fell during the last ``lag`` of its (effective) steps (more than
``lag`` behind in steps: a seed's early descent or a phase change a little later is not a
page), for ``min_points`` updates and ``persist`` of the steps so far. Being ahead never
pages. It resolves when the gap is back within the pair's noise (``units < gate / 2`` or
under ``noise_gate`` noises) for as long as it had to hold to page: a gap that wanders
across the bar does not page again at each crossing. ``warming`` over the first ``warm`` of the reference's
steps; ``no_overlap`` outside them (no extrapolation; a ``behind`` stays as it was);
``schedule_differs`` when the lr differs from the reference's by over ``lr_tol`` for
``min_points`` updates (a run that sends no lr is compared on its loss alone). Against
such a sibling only a far gap pages (``lr_far``, ``lr_lag``), or one the run no longer
closes: *stuck*, over ``lr_stuck`` of the reference's progress behind while its own level
fell less than ``stuck_keep`` x the gap over the last half of its steps, from
``stuck_warm`` of the reference's steps (a sweep's lr 1e-1 member sat at 4.7 from step 120
while its lr 3e-3 sibling fell to 1.6; a member at a tenth of the lr is slower, but it
keeps falling; before ``stuck_warm`` a slow start looks the same). ``gate`` and ``lag``:
docs/REFERENCES.md, "The detector".

>>> import random
>>> rng = random.Random(0)
>>> steps = range(1, 3001)
>>> curve = [2 + 3 * s ** -0.5 for s in steps]
>>> tr = ReferenceTracker([ReferenceCurve("run-a", steps, [c + rng.gauss(0, .02) for c in curve])])
>>> v = [tr.update(s, c + (0.3 if s > 1000 else 0) + rng.gauss(0, .02)) for s, c in zip(steps, curve)]
>>> b = next(x for x in v if x.state == "behind"); b.step, b.finding().kind
(1036, 'behind')
>>> v[-1].message
"0.30 above run-a at step 3,000 (10% of run-a's progress by then)"
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Sequence

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

if not cython.compiled:       # compiled: libc's, cimported in reference.pxd
    from math import exp, fabs, isfinite, log, sqrt

from .errors import ConfigError
from .reference_config import ReferenceConfig
from .reference_verdict import ReferenceVerdict, plain as _plain
from .reference_curve import ReferenceCurve

__all__ = ["ReferenceConfig", "ReferenceCurve", "ReferenceTracker", "ReferenceVerdict", "STATES"]

NAN = cython.declare(cython.double, math.nan)
NO_STEP = cython.declare(cython.longlong, -(2 ** 63))
GAP = cython.declare(cython.double, 4.0)       # a gap weighs at most 4 usual gaps (base.gap_decay)
MAD = cython.declare(cython.double, 1.2533)     # sd / mean |x| of a normal
INF = cython.declare(cython.double, math.inf)
STATES = ("ok", "behind", "schedule_differs", "no_overlap", "warming")
OK, BEHIND, SCHEDULE, NO_OVERLAP, WARMING = 0, 1, 2, 3, 4


# the tracker's learned state (`snapshot`): every field but the references' and the config's
_STATE = ("_by_tokens", "_n", "_since", "_held", "_step", "_cstep", "_x", "_dt", "_level", "_prev",
          "_scat", "_gx", "_gprev", "_wander", "_gap", "_units", "_spread", "_state", "_worst",
          "_resolved", "_cond", "_still", "_cur", "_curl", "_lrbad", "_lv_now", "_sched", "_lrnow",
          "_lrref", "_hx", "_hlv", "_rlv")
# (``_sched``, ``_lrnow``, ``_lrref`` and the run's own history ``_hx``, ``_hlv`` came
# later: a snapshot without them keeps their fresh values)
HIST_STEP = cython.declare(cython.double, 1.25)   # the run's own levels, kept every 25% of x
HIST_MAX = cython.declare(cython.Py_ssize_t, 256)   # ... at most this many (steps to 2^63: 196)


@cython.cclass
class ReferenceTracker:
    """One live run against one or several references. ``feed`` is the per-update path
    (returns the state's index in `STATES`, builds nothing); ``verdict`` builds the value;
    ``update`` is both."""

    def __init__(self, references: Sequence[ReferenceCurve],
                 config: ReferenceConfig = ReferenceConfig()) -> None:
        refs = list(references)
        if not refs or not all(isinstance(r, ReferenceCurve) for r in refs):
            raise ConfigError(f"references must be a non-empty list of ReferenceCurve, got {references!r}")
        if not isinstance(config, ReferenceConfig):
            raise ConfigError(f"config must be a ReferenceConfig, got {config!r}")
        self.references, self.config = tuple(refs), config
        self._c_gate, self._c_ngate = config.gate, config.noise_gate
        self._c_hl, self._c_persist, self._c_lrtol = config.halflife, config.persist, config.lr_tol
        self._c_minpts, self._c_lag, self._c_warm = config.min_points, config.lag, config.warm
        self._c_far, self._c_lrlag = config.lr_far, config.lr_lag
        self._c_stuck, self._c_keep, self._c_swarm = config.lr_stuck, config.stuck_keep, config.stuck_warm
        self._c_tau = config.halflife / math.log(2.0)
        # a loss that falls over decades is compared on its logarithm; a live loss at or
        # under 0 counts as a thousandth of the references' least
        self._log = all(r.spans_decades(config.halflife, config.start_points) for r in refs)
        self._floor = min(min(r.losses) for r in refs) / 1000.0
        self._xs, self._lv, self._lr = [], [], []
        self._names, self._noise, self._start = [], [], []
        for r in ([r.logged() for r in refs] if self._log else refs):
            lv, noise, start = r.levels(config.halflife, config.start_points)
            self._xs.append(list(r.steps))
            self._lv.append(list(lv))
            self._lr.append(list(r.lrs))
            self._names.append(r.name)
            self._noise.append(noise)
            self._start.append(start)
        self._tok = [list(r.tokens) for r in refs] if all(r.has_tokens for r in refs) else None
        self._has_lr = [r.has_lr for r in refs]
        self._cur, self._curl, self._lv_now = [0] * len(refs), [0] * len(refs), [NAN] * len(refs)
        self._lrbad = [0] * len(refs)
        self._lrref = [NAN] * len(refs)        # each reference's lr at the last comparison
        self._lrnow, self._sched = NAN, False   # the run's lr then; every reference's differs
        self._by_tokens = -1                   # decided at the first update: 1 tokens, 0 steps
        self._n, self._since, self._held = 0, NO_STEP, 0
        self._x, self._dt, self._level, self._prev, self._scat = NAN, 1.0, NAN, NAN, 0.0
        self._gx, self._gprev, self._wander = NAN, NAN, 0.0
        self._state, self._resolved, self._worst = WARMING, False, 0
        self._gap, self._units, self._step, self._cstep = NAN, NAN, 0, 0
        self._rlv = NAN                        # the furthest reference's level at the comparison
        self._spread, self._cond, self._still = 0.0, False, False
        self._hx, self._hlv = [], []           # the run's own level, every `HIST_STEP` of x
        # at the last comparison: its fall over the last half of x (NaN: not needed), stuck?
        self._fall, self._stuck = NAN, False

    def update(self, step: int, loss: float, lr: float = NAN, tokens: float = NAN) -> ReferenceVerdict:
        """Feed one point of the live run; the comparison at it."""
        self.feed(step, loss, lr, tokens)
        return self.verdict()

    @cython.locals(x=cython.double, k=cython.int)
    def feed(self, step: int, loss: float, lr: float = NAN, tokens: float = NAN) -> int:
        """The per-update path: fold the point in, judge, return the state's index."""
        self._resolved = False
        if not isfinite(loss):
            return self._state                 # NaN is the nonfinite detector's finding
        if self._log:
            loss = log(loss if loss > self._floor else self._floor)
        if self._by_tokens < 0:
            self._by_tokens = 1 if self._tok is not None and isfinite(tokens) else 0
        x = tokens if self._by_tokens == 1 else float(step)
        if not isfinite(x):
            return self._state
        self._level_in(float(step), loss)
        self._step = step
        self._own(x)
        k = self._compare(x, lr)
        if k != OK:                            # not judged: a behind stays (no news)
            self._since, self._held = NO_STEP, 0
            if self._state != BEHIND or k == SCHEDULE:
                self._resolved = self._state == BEHIND
                self._state = k
            return self._state
        if self._state == BEHIND:
            if self._still:
                self._since, self._held = NO_STEP, 0
            elif self._holds(step):     # back within noise for as long as it took to page
                self._state, self._resolved = SCHEDULE if self._sched else OK, True
                self._since, self._held = NO_STEP, 0
            return self._state
        if self._cond:
            if self._holds(step):
                self._state, self._since, self._held = BEHIND, NO_STEP, 0
                return self._state
        else:
            self._since, self._held = NO_STEP, 0
            if not self._still:
                self._wander_in(float(step))
        self._state = SCHEDULE if self._sched else OK
        return self._state

    def _holds(self, step: int) -> bool:
        """One more update of the condition being counted (behind, or back from it): True
        once it has held ``min_points`` updates and ``persist`` of the steps so far."""
        if self._since == NO_STEP:
            self._since, self._held = step, 0
        self._held += 1
        return self._held >= self._c_minpts and step - self._since >= self._c_persist * step

    @cython.locals(dt=cython.double, a=cython.double, d=cython.double)
    def _level_in(self, x: float, loss: float) -> None:
        """Fold a loss at step ``x`` into the level (time in steps on either axis)."""
        self._n += 1
        if self._n == 1:
            self._level, self._prev, self._x = loss, loss, x
            return
        dt = x - self._x
        if dt < 0.0:
            dt = 0.0
        self._x = x
        a = 0.5 ** ((dt if dt < GAP * self._dt else GAP * self._dt) / self._c_hl)
        self._dt = 0.9 * self._dt + 0.1 * dt if self._n > 2 else (dt if dt > 0.0 else 1.0)
        self._level = a * self._level + (1.0 - a) * loss
        d = fabs(loss - self._prev)
        self._prev = loss
        self._scat = d if self._n == 2 else 0.98 * self._scat + 0.02 * d

    @cython.locals(n=cython.Py_ssize_t)
    def _own(self, x: float) -> None:
        """Keep the run's own level every `HIST_STEP` of ``x`` (log-spaced: a few hundred
        entries over any run)."""
        n = len(self._hx)
        if x > 0.0 and (n == 0 or x >= HIST_STEP * self._hx[n - 1]):
            if n >= HIST_MAX:       # a hostile axis (tokens from 1e-300): every other one
                del self._hx[::2]
                del self._hlv[::2]
            self._hx.append(x)
            self._hlv.append(self._level)

    @cython.locals(j=cython.Py_ssize_t, half=cython.double)
    def _fell(self, x: float) -> float:
        """How far the run's own level fell since half of ``x`` (NaN: no level kept then)."""
        half = 0.5 * x
        j = bisect_right(self._hx, half) - 1
        return self._hlv[j] - self._level if j >= 0 and self._hx[0] < half else NAN

    @cython.locals(xs=list, lv=list, n=cython.int, j=cython.int, x0=cython.double,
                   x1=cython.double, w=cython.double)
    def _at(self, i: int, x: float, cur: list, ys: list) -> float:
        """Reference ``i``'s ``ys`` at ``x`` (inside its range), linearly interpolated;
        ``cur[i]`` remembers where the last look-up was (a live run moves forward)."""
        xs = self._tok[i] if self._by_tokens == 1 else self._xs[i]
        lv = ys[i]
        n = len(xs)
        j = cur[i]
        if j > n - 2 or xs[j] > x:
            j = bisect_right(xs, x) - 1
            j = 0 if j < 0 else (n - 2 if j > n - 2 else j)
        while j < n - 2 and xs[j + 1] <= x:
            j += 1
        cur[i] = j
        x0, x1 = xs[j], xs[j + 1]
        w = (x - x0) / (x1 - x0)
        if w < 0.0:
            w = 0.0
        return lv[j] + w * (lv[j + 1] - lv[j])

    @cython.locals(i=cython.int, m=cython.int, sched=cython.int, warm=cython.bint,
                   lv=cython.double, gap=cython.double, u=cython.double, lr_ref=cython.double,
                   worst=cython.double, s=cython.double, s2=cython.double, xl=cython.double,
                   lag=cython.double, noise=cython.double, live=cython.double, a=cython.double,
                   ok=cython.bint, still=cython.bint, eff=cython.double, st=cython.double,
                   nz=cython.double, nref=cython.int, other=cython.bint, bar=cython.double,
                   stuck=cython.bint, own=cython.double)
    def _compare(self, x: float, lr: float) -> int:
        """The gap to each reference at ``x``; the state it allows (OK: judged, with
        ``_cond``: behind every reference, and ``_still``: not yet back within noise)."""
        m, sched, warm, ok, still = 0, 0, False, True, True
        worst, s, s2 = -INF, 0.0, 0.0
        nref = len(self._xs)
        for i in range(nref):
            xs = self._tok[i] if self._by_tokens == 1 else self._xs[i]
            if x < xs[0] or x > xs[len(xs) - 1]:
                self._lv_now[i] = NAN
                continue
            lv = self._at(i, x, self._cur, self._lv)
            self._lv_now[i] = lv
            self._lrref[i] = NAN
            if isfinite(lr) and self._has_lr[i]:
                lr_ref = self._at(i, x, self._cur, self._lr)
                if isfinite(lr_ref) and fabs(lr - lr_ref) > self._c_lrtol * max(fabs(lr_ref), 1e-12):
                    self._lrbad[i] += 1
                else:
                    self._lrbad[i] = 0
                if self._lrbad[i] >= self._c_minpts:
                    sched += 1          # compared, against the far bar (``lr_far``, ``lr_lag``)
                    self._lrref[i] = lr_ref
            m += 1
            s += lv
            s2 += lv * lv
            if x < xs[0] + self._c_warm * (xs[len(xs) - 1] - xs[0]) or self._n < 2:
                warm = True
        self._lrnow = lr
        self._sched = sched == m and m > 0
        if m == 0 or warm:
            return (SCHEDULE if self._sched else WARMING) if warm else NO_OVERLAP
        self._spread = sqrt(max(s2 / m - (s / m) * (s / m), 0.0) * m / (m - 1)) if m > 1 else 0.0
        a = 0.5 ** (self._dt / self._c_hl)
        live = self._scat * MAD / sqrt(2.0) * sqrt((1.0 - a) / (1.0 + a))
        # the level at step s stands for step s - tau (tau: its weights' mean age): the lag
        # is measured on that effective step, so a young run's smoothing is not a lag
        eff = 1.0 - self._c_tau / self._step if self._step > self._c_tau else 0.0
        self._fall, self._stuck = NAN, False
        for i in range(nref):
            lv = self._lv_now[i]
            if not isfinite(lv):
                continue
            gap = self._level - lv
            st = self._start[i]
            u = gap / (st - lv) if st > lv else (INF if gap > 0.0 else 0.0)
            other = isfinite(self._lrref[i])      # another lr: only a far gap counts
            bar = self._c_far if other else self._c_gate
            xl = x * (1.0 - (self._c_lrlag if other else self._c_lag) * eff)
            xs = self._tok[i] if self._by_tokens == 1 else self._xs[i]
            lag = self._at(i, xl if xl > xs[0] else xs[0], self._curl, self._lv) - lv
            nz = self._noise[i]
            own = live * live + nz * nz + self._spread * self._spread
            noise = sqrt(own + self._wander * self._wander)
            # another lr: stuck, the gap material and the run no longer closing it; the gap's
            # wander is no noise here (a stuck run's gap to a falling sibling wanders by design)
            if other and u > self._c_stuck and self._fall != self._fall:
                self._fall = self._fell(x)      # only where the stuck rule may judge
            stuck = (other and u > self._c_stuck and self._fall < self._c_keep * gap
                     and x >= xs[0] + self._c_swarm * (xs[len(xs) - 1] - xs[0])
                     and gap > self._c_ngate * sqrt(own))
            ok = ok and (stuck or (u > bar and gap > lag and gap > self._c_ngate * noise))
            still = still and (stuck or (u > 0.5 * bar and gap > self._c_ngate * noise))
            if u > worst:
                worst, self._worst, self._gap, self._units, self._rlv = u, i, gap, u, lv
                self._stuck = stuck
        self._cond, self._still, self._cstep = ok, still, self._step
        return OK

    @cython.locals(d=cython.double)
    def _wander_in(self, x: float) -> None:       # x: the step
        """The gap's own drift while both runs agree: every 2 half-lives, the change of
        the gap, as an EWMA of its absolute value (a seed's wander, not a fault's trend:
        measured only while the gap is not material)."""
        if not isfinite(self._gx):
            self._gx, self._gprev = x, self._gap
            return
        if x - self._gx < 2.0 * self._c_hl:
            return
        d = fabs(self._gap - self._gprev)
        self._wander = d if self._wander == 0.0 else 0.8 * self._wander + 0.2 * d
        self._gx, self._gprev = x, self._gap

    def snapshot(self) -> dict:
        """The learned state as plain values (NaN and no-step as None): msgpack/JSON-safe.
        The references are not in it: `restore` needs a tracker built on the same ones."""
        out: dict = {"references": list(self._names), "log": self._log}
        for k in _STATE:
            v = getattr(self, k)
            out[k] = [_plain(x) for x in v] if isinstance(v, list) else _plain(v)
        out["_since"] = None if self._since == NO_STEP else self._since
        return out

    def restore(self, snap: dict) -> None:
        """Continue from `snapshot` (the same references, by name, in the same order)."""
        if snap.get("references") != list(self._names):
            raise ConfigError(f"this snapshot was taken against references {snap.get('references')!r}, "
                              f"not {list(self._names)!r}")
        if bool(snap.get("log", False)) != self._log:
            return      # the curves grew into the other scale: their levels compare afresh
        for k in _STATE:
            if k not in snap:       # a field added since the snapshot was taken
                continue
            v = snap[k]
            if k == "_since":
                self._since = NO_STEP if v is None else v
            else:
                setattr(self, k, [NAN if x is None else x for x in v] if isinstance(v, list)
                        else (NAN if v is None else v))

    def verdict(self) -> ReferenceVerdict:
        """The value of the last update's comparison (a ``behind`` not compared at this
        update keeps the gap it was last compared at, and says when)."""
        state, name = STATES[self._state], self._names[self._worst]
        if state not in ("ok", "behind", "schedule_differs") or (
                state == "schedule_differs" and not isfinite(self._gap)):
            gap = units = NAN
            msg = {"schedule_differs": f"lr differs from the reference's by over {self._c_lrtol:.0%}"
                   f"{self._lrs(self._worst)}",
                   "no_overlap": f"step {self._step:,} is outside every reference's steps",
                   "warming": f"step {self._step:,} is in the first {self._c_warm:.0%} of the reference's steps"
                   if self._n else "no finite loss yet"}[state]
            return ReferenceVerdict(state, name, gap, units, msg + ": not compared", self._step, self._resolved)
        gap, units = self._gap, self._units
        if self._log:      # in loss units, and the ratio
            theirs = exp(self._rlv)
            gap = theirs * (exp(self._gap) - 1.0)
            msg = (f"{theirs + gap:.3g} is {exp(self._gap):.3g}x {name}'s {theirs:.3g} at step "
                   f"{self._cstep:,} ({abs(units):.0%} of {name}'s progress by then, on a log scale)")
        else:
            msg = (f"{abs(gap):.2f} {'above' if gap >= 0 else 'below'} {name} at step {self._cstep:,} "
                   f"({abs(units):.0%} of {name}'s progress by then)")
        if self._cstep != self._step:
            msg += f"; not compared since (step {self._step:,})"
        if self._stuck and state == "behind":
            half = f"the last half of its {'tokens' if self._by_tokens == 1 else 'steps'}"
            fell = f"{1.0 - exp(-self._fall):.0%}" if self._log else f"{self._fall:.2g}"
            msg += (f", and it fell only {fell} over {half}: stuck" if self._fall > 0.0
                    else f", and it has not fallen over {half}: stuck")
        if isfinite(self._lrref[self._worst]):
            msg += f"; lr differs{self._lrs(self._worst)}"
        elif self._sched:
            msg += "; lr differs"
        if state == "schedule_differs":
            msg += f": compared only for a gap over {self._c_far:.0%} of its progress"
        return ReferenceVerdict(state, name, gap, units, msg, self._step, self._resolved)

    def _lrs(self, i: int) -> str:
        """" (1e-4 vs 1e-3)": the run's lr and reference ``i``'s at the last comparison."""
        if not (isfinite(self._lrnow) and isfinite(self._lrref[i])):
            return ""
        return f" ({self._lrnow:.3g} vs {self._lrref[i]:.3g})"
