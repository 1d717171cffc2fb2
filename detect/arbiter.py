"""`Arbiter`: the findings' bookkeeping of one run, which `monitor.RunMonitor` owns.

It holds what the run has emitted, per kind (``emitted``: ``[active, severity]``), and
decides when a kind's finding is due (`due`: its (active, severity) changed) and emits it
(`push`); it applies the `effect` gate to a page's size (`big`, `size`, `rise`,
`stalled`), holds a page of the loss level until the loss comes back (`recovery`), and
escalates one that does not (`escalate`). The rules that decide which kinds are active,
at which severity, are `rules`; the state of the episode they are in is `Episode`.

It reads the detectors through their public verdicts (`Detector.verdict` and the fields
the verdict is made of), never their private fields.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from . import messages
from .alert import KINDS
from .finding import Finding
from .recovery import HELD_KINDS, Recovery

_NAN = cython.declare(cython.double, math.nan)
JUMPS = ("spike", "resume_jump")   # one point's jump, judged against `effect.jump_gate`
_RANK = {"info": 0, "warning": 1, "critical": 2}
STALL_Z = 2.0   # standard errors of a slowdown's observed fall granted to it (`stalled`)
# a slowdown is judged over at least this many of the run's points since its onset: the
# shortfall over one or two points is the onset's own update (a clean LLM log paged "it
# fell 2.37e-05 in the 2 steps since step 6582")
STALL_MIN_POINTS = 10
GRAD_CONTEXT_STEPS = 200   # a grad-norm surge this recent is named in a loss page
# the kinds the named rules judge (`rules`); a detector of another kind pages its own
# verdict (`rules.own_pages`), and its page is an incident, like a page of the loss level
RULED = ("resume_jump", "nonfinite", "divergence", "spike", "plateau", "drift", "overfit",
         "throughput", "memory")
# each kind's bit in ``Arbiter.ever`` (the kinds emitted so far: a C test per rule and
# update, not a dict lookup), from the alert kinds' order
BITS = {kind: 1 << i for i, kind in enumerate(KINDS)}


def bits(kinds) -> int:
    """The `BITS` of ``kinds``, or-ed."""
    out = 0
    for kind in kinds:
        out |= BITS.get(kind, 0)
    return out


# a slowdown's episode is named (`Episode.slowdown_as`): not yet, as a plateau, as a drift
UNNAMED = cython.declare(cython.int, 0)
AS_PLATEAU = cython.declare(cython.int, 1)
AS_DRIFT = cython.declare(cython.int, 2)


@cython.cclass
class Episode:
    """The episode the run is in, as the rules remember it (not state: a restored monitor
    starts a new episode). ``slowdown_as``: the name a slowdown's page took for the rest
    of its episode (`UNNAMED`, `AS_PLATEAU`, `AS_DRIFT`: no flapping between the two
    while the level hovers around its onset); ``shift_from``: the divergence's excursion
    when a sustained jump explained it as a level shift (NaN outside one); ``fc_drift``:
    a drift paged during the forecast's alarm in progress (`rules.plateau`: a stagnation
    under it is the drift's flat tail, not a second page)."""

    def __init__(self) -> None:
        self.slowdown_as = UNNAMED
        self.shift_from = _NAN
        self.fc_drift = False


@cython.cclass
class Arbiter:
    """The findings' bookkeeping and the gate; ``attach`` points it at the detectors."""

    def __init__(self) -> None:
        self.emitted = {}
        self.since = {}            # per active kind: the step its finding became active
        self.ever = 0              # `BITS` of the kinds in ``emitted``
        self.out = []              # the findings of the update in progress (`push`)
        self.rec = Recovery()      # the band each page of the loss level left (`recovery`)
        self.held = self.rec.held
        self.peak_scores = {}      # diagnostics, not state: see ``big``
        self.alert = False         # any warning/critical kind active (follows ``emitted``)
        self.episode = Episode()
        self.rising = self.explained = self.dv_page = self.drift = self.pl_up = False
        self.handover = self.slowdown = self.stagnation = False
        self.absorbing, self.absorbing_bits = (), 0
        self.rewound_to = None

    def attach(self, d: dict) -> None:
        """Read the verdicts of the detectors ``d`` (a monitor's, by name) from now on."""
        self.rj, self.nf, self.gn = d["resume_jump"], d["nonfinite"], d["gradnorm"]
        self.fc = d["finetuning"] if "finetuning" in d else d["forecast"]
        self.sp, self.dv, self.ri = d["spike"], d["divergence"], d["rise"]
        self.pl, self.ef, self.ov = d["plateau"], d["effect"], d["overfit"]
        self.tp, self.mem = d["throughput"], d["memory"]
        self.own = tuple([det for det in d.values() if det.KIND and det.KIND not in RULED])
        self.own_kinds = tuple([det.KIND for det in self.own])
        self.own_gives_way = tuple([det.GIVES_WAY for det in self.own])
        self.incidents = HELD_KINDS + self.own_kinds
        self.absorbing = tuple([det.KIND for det in self.own if det.ABSORBS])
        self.absorbing_bits = bits(self.absorbing)

    def restore(self, emitted: dict, recovery: dict, since: dict | None = None) -> None:
        self.emitted = {k: list(v) for k, v in emitted.items()}
        self.since = dict(since or {})
        self.ever = bits(self.emitted)
        self.alert = any(v[0] and v[1] != "info" for v in self.emitted.values())
        self.rec.restore(recovery)

    def due(self, kind: str, active: bool, severity: str) -> bool:
        """Does ``kind``'s (active, severity) change, so that a finding is emitted?"""
        if not active and self.held and kind in self.held and not self.rec.recovered(kind):
            return False    # a page resolves once the loss is back in the band it left
        prev = self.emitted.get(kind)
        if prev is None:
            return active
        if active and prev[0] and _RANK[severity] < _RANK[prev[1]]:
            return False    # a kind that pages keeps paging until its detector is quiet
        return not (prev[0] == active and (prev[1] == severity or not active))

    def push(self, kind: str, active: bool, severity: str, step, text, details: str = "") -> None:
        """Emit the finding `due` allowed (into this update's findings); ``text`` is the
        headline of an active one (`messages`), formatted only when a finding is emitted,
        ``details`` its statistics. A page (warning, critical) ends with the first thing
        to check and its runbook (`messages.check`)."""
        prev = self.emitted.get(kind)
        self.emitted[kind] = [active, severity]
        self.ever |= BITS.get(kind, 0)
        if active and (prev is None or not prev[0]):
            self.since[kind] = step
        elif not active:
            self.since.pop(kind, None)
        if active and severity != "info":
            self.rec.paged(kind, step, self.ef)
        elif not active and kind in self.held:
            self.rec.release(kind)
        self.alert = any(v[0] and v[1] != "info" for v in self.emitted.values())
        if not active:
            text = f"{kind} resolved"
        elif severity != "info":
            text += messages.check(kind, self.gn.context(step, GRAD_CONTEXT_STEPS))
        self.out.append(Finding(kind, severity, active, step, text, details))

    def onset(self, kind: str, step):
        """The step ``kind``'s active finding began (``step`` when it is not active yet)."""
        v = self.emitted.get(kind)
        if v is not None and v[0]:
            return self.since.get(kind, step)
        return step

    def paging(self, kinds: tuple, critical: bool = False) -> bool:
        """Does a page (warning or critical; ``critical``: critical only) of one of
        ``kinds`` fire?"""
        for kind in kinds:
            v = self.emitted.get(kind)
            if v is not None and v[0] and v[1] != "info" and (not critical or v[1] == "critical"):
                return True
        return False

    def escalate(self, step) -> None:
        """A page whose loss stays above the band it left for ``ESCALATE_AFTER`` x the
        level's time scale, by a tenth of the run's progress, becomes critical
        (`recovery`), unless one already is."""
        for v in self.emitted.values():
            if v[0] and v[1] == "critical":
                return
        for kind in self.rec.overdue(step, self.ef):
            head, det = self.rec.message(kind, step, self.ef.progress)
            self.push(kind, True, "critical", step, head, det)
            return

    def big(self, kind: str, effect: float) -> bool:
        """Is a deviation of ``effect`` loss units large enough to page (`effect`)? Also
        keeps, per kind, the largest score seen while its detector was active
        (``peak_scores``: what the harness calibrates the gate on; a slowdown's under
        ``"slowdown"``, since it pages only past ``stall_gate`` too)."""
        ef = self.ef
        jump = kind in JUMPS
        score = ef.score(effect, jump)
        if score > self.peak_scores.get(kind, -math.inf):
            self.peak_scores[kind] = score
        return score > (ef.jump_gate if jump else ef.gate)

    @cython.locals(ratio=cython.double, made=cython.double)
    def stalled(self, pl, risen: bool = False) -> bool:
        """Did a slowdown whose shortfall is material stop the run learning earlier than it
        should? The decline its earlier pace promised since the onset (``expected``) is
        over ``stall_gate`` times what the level may have fallen (``observed``, at least 0,
        plus ``STALL_Z`` of its standard errors: a fall within the level's noise is not
        known to be none): a run that only slowed down keeps a good part of it. ``risen``:
        the level stands a material amount above its best or its forecast, evidence of its
        own; then the fall as measured is enough. Not before `STALL_MIN_POINTS` points
        since the onset. Keeps the ratio's peak
        (``peak_scores["stall"]``: what calibrates ``stall_gate``)."""
        if pl.step - pl.onset < STALL_MIN_POINTS * self.ef.spacing:
            return False
        made = max(pl.observed, 0.0)
        if not risen:
            made += STALL_Z * pl.observed_sd()
        if pl.expected <= 0.0:
            ratio = 0.0     # nothing promised yet (the onset's own update: 0 / 0): no stall
        elif made > pl.expected * 1e-6:
            ratio = pl.expected / made
        else:
            ratio = 1e6
        if ratio > self.peak_scores.get("stall", -math.inf):
            self.peak_scores["stall"] = ratio
        return ratio > self.ef.stall_gate

    def size(self, effect: float) -> str:
        """The effect a page states, in loss units and against the run's own progress."""
        return messages.size(effect, self.ef.progress)

    def rise(self, l_pred) -> float:
        """The deviation of a drift or a plateau in loss units: the level above its best,
        or above the forecast when there is one, whichever is larger. A forecast below
        ``best - progress`` (the run falling further than it has come so far: an
        extrapolation gone wrong, like an exponential law refitted across a 43,000-step
        gap that predicted 0.37 for a t5 loss at 1.8) counts for nothing."""
        ef = self.ef
        level, best = ef.level, ef.best
        up = max(level - best, ef.fast_rise())
        if l_pred is None or l_pred < best - ef.progress:
            return up
        return max(up, level - l_pred)

    def drift_effect(self) -> float:
        """A drift's deviation in loss units: above its forecast (while that alarms) or its
        best; a risen slowdown's shortfall when neither says it."""
        fc_alert = self.fc.alert
        effect = self.rise(self.fc.l_pred if fc_alert else None)
        if self.pl_up and not (fc_alert or self.rising):
            effect = max(effect, self.pl.shortfall)
        return effect
