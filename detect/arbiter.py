"""`Arbiter`: from the detectors' verdicts to the findings of one run (the base class of
`monitor.RunMonitor`).

It holds the monitor's state (its C fields are declared in ``arbiter.pxd``) and decides
what each update emits: a kind's finding when its (active, severity) changes (`_due`,
`_push`), the `effect` gate on a page's size (`_big`, `_size`), the arbitration between
kinds (`_arbitrate`: a sustained spike or a divergence over the forecast's drift, a drift
that is a flat line as ``plateau``, a slowdown that gives way to a drift; `_stalled`,
`_incident`, `_rise`, `_progress`), the escalation of a page that does not come back
(`_escalate`) and the page's words (`_plateau_msg`).

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (detect/_cython_shim.py)
    from . import _cython_shim as cython

from .base import NO_STEP as _NO_STEP
from .finding import Finding
from .recovery import HELD_KINDS

NO_STEP = cython.declare(cython.longlong, _NO_STEP)
_NAN = cython.declare(cython.double, math.nan)
# a critical divergence has run away by at least this fraction of the run's progress
DIVERGENCE_OF_PROGRESS = 0.1
# a divergence that a sustained jump explains is a level shift (warning) until the level
# has grown this much again since it became active (then it runs away: critical)
SHIFT_GROWTH = 1.5
JUMPS = ("spike", "resume_jump")   # one point's jump, judged against `effect.jump_gate`
_RANK = {"info": 0, "warning": 1, "critical": 2}
STALL_Z = 2.0   # standard errors of a slowdown's observed fall granted to it (`_stalled`)
GRAD_CONTEXT_STEPS = 200   # a grad-norm surge this recent is named in a loss page

_NO_LEARNING = ("no_learning", "frozen")

# the kinds emitted so far, as bits of ``_kinds`` (a C test per update, not a dict lookup)
_RJ = cython.declare(cython.int, 1)
_NF = cython.declare(cython.int, 2)
_DV = cython.declare(cython.int, 4)
_SP = cython.declare(cython.int, 8)
_PL = cython.declare(cython.int, 16)
_DR = cython.declare(cython.int, 32)
_BIT = {"resume_jump": _RJ, "nonfinite": _NF, "divergence": _DV, "spike": _SP,
        "plateau": _PL, "drift": _DR}


def _plateau_msg(pl, fc, rose: bool = False, best: float = 0.0) -> str:
    """The page of a plateau, from the plateau and forecast detectors' last ``observe()``;
    ``rose``: a slowdown whose level has since risen above its ``best``, paged as a drift."""
    if pl.rule == "frozen":
        return (f"loss frozen at exactly {pl.level!r} for {pl.repeats} points in a row: the logged "
                "loss stopped updating (often a NaN the logger hides)")
    if pl.rule == "no_learning":
        return (f"no learning: loss level {pl.level:.4g} fell only {pl.progress:.2%} since the "
                f"start ({pl.progress_z:.1f} times its point-to-point scatter)")
    if pl.rule == "slowdown" and pl.expected <= 0.0:     # its onset: nothing measured yet
        return f"loss {pl.level:.4g} stopped falling at its earlier pace at step {pl.onset}"
    if pl.rule == "slowdown":
        since = (f"in the {pl.step - pl.onset} steps since step {pl.onset}, where its own "
                 f"earlier pace would have taken it {pl.expected:.3g} lower")
        if rose:
            return (f"loss level {pl.level:.4g} rose above its best {best:.4g} after it stopped "
                    f"falling at step {pl.onset} (its own earlier pace would have taken it "
                    f"{pl.expected:.3g} lower since)")
        if pl.observed < 0 and -pl.observed > STALL_Z * pl.observed_sd():
            # a level that climbed since the onset (a ramp under its drift gate) is said to
            # rise: "stopped improving" alone read as a flat loss (issue 22 part 5)
            return (f"loss rose {-pl.observed:.3g} to {pl.level:.4g} in the {pl.step - pl.onset} "
                    f"steps since it stopped improving at step {pl.onset}, where its own earlier "
                    f"pace would have taken it {pl.expected:.3g} lower")
        fell = (f"it fell {pl.observed:.3g}" if pl.observed >= 0 else
                f"it did not fall ({-pl.observed:+.2g}, within its noise)")
        return f"loss stopped improving at {pl.level:.4g}: {fell} {since}"
    return f"loss flat at {pl.level:.4g} while its forecast {fc.l_pred or 0:.4g} keeps falling"


@cython.cclass
class Arbiter:
    """The findings' bookkeeping and the arbitration of `monitor.RunMonitor`."""

    def _due(self, kind: str, active: bool, severity: str) -> bool:
        """Does ``kind``'s (active, severity) change, so that a finding is emitted?"""
        if not active and self._held and kind in self._held and not self._rec.recovered(kind):
            return False    # a page resolves once the loss is back in the band it left
        prev = self._emitted.get(kind)
        if prev is None:
            return active
        if active and prev[0] and _RANK[severity] < _RANK[prev[1]]:
            return False    # a kind that pages keeps paging until its detector is quiet
        return not (prev[0] == active and (prev[1] == severity or not active))

    def _push(self, kind: str, active: bool, severity: str, step, text) -> None:
        """Emit the finding `_due` allowed (into this update's findings); ``text`` is the
        message of an active one, formatted only when a finding is emitted."""
        self._emitted[kind] = [active, severity]
        self._kinds |= _BIT.get(kind, 0)
        if active and severity != "info":
            self._rec.paged(kind, step, self._ef)
        elif not active and kind in self._held:
            self._rec.release(kind)
        self._alert = any(v[0] and v[1] != "info" for v in self._emitted.values())
        if not active:
            text = f"{kind} resolved"
        elif severity != "info":
            grad = self._gn.context(step, GRAD_CONTEXT_STEPS)
            if grad:
                text += f" ({grad})"
        self._out.append(Finding(kind, severity, active, step, text))

    def _escalate(self, step) -> None:
        """A page whose loss stays above the band it left for ``ESCALATE_AFTER`` x the
        level's time scale, by a tenth of the run's progress, becomes critical
        (`recovery`), unless one already is."""
        for v in self._emitted.values():
            if v[0] and v[1] == "critical":
                return
        for kind in self._rec.overdue(step, self._ef):
            self._push(kind, True, "critical", step, self._rec.message(kind, step))
            return

    def _big(self, kind: str, effect: float) -> bool:
        """Is a deviation of ``effect`` loss units large enough to page (`effect`)? Also
        keeps, per kind, the largest score seen while its detector was active
        (``peak_scores``: what the harness calibrates the gate on)."""
        ef = self._ef
        jump = kind in JUMPS
        score = ef.score(effect, jump)
        if score > self.peak_scores.get(kind, -math.inf):
            self.peak_scores[kind] = score
        return score > (ef.jump_gate if jump else ef.gate)

    @cython.locals(ratio=cython.double, made=cython.double)
    def _stalled(self, pl, risen: bool = False) -> bool:
        """Did a slowdown whose shortfall is material stop the run learning earlier than it
        should? The decline its earlier pace promised since the onset (``expected``) is
        over ``stall_gate`` times what the level may have fallen (``observed``, at least 0,
        plus ``STALL_Z`` of its standard errors: a fall within the level's noise is not
        known to be none): a run that only slowed down keeps a good part of it. ``risen``:
        the level stands a material amount above its best or its forecast, evidence of its
        own; then the fall as measured is enough. Keeps the ratio's peak
        (``peak_scores["stall"]``: what calibrates ``stall_gate``)."""
        ef = self._ef
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
        return ratio > ef.stall_gate

    def _incident(self, but: str = "") -> bool:
        """Does a page of the loss level (`recovery.HELD_KINDS`: drift, spike, divergence)
        fire? Then a slowdown or a stagnation is that incident's flat tail, and a drift
        its level, not a second page (LR x100 and shuffled labels paged `plateau` beside
        their critical divergence, shuffled labels a `drift` too, 380 steps later)."""
        for kind in HELD_KINDS:
            v = self._emitted.get(kind) if kind != but else None
            if v is not None and v[0] and v[1] != "info":
                return True
        return False

    def _drift_effect(self, fc, pl, fc_alert: bool, rising: bool, pl_up: bool) -> float:
        """A drift's deviation in loss units: above its forecast (while that alarms) or its
        best; a risen slowdown's shortfall when neither says it."""
        effect = self._rise(fc.l_pred if fc_alert else None)
        if pl_up and not (fc_alert or rising):
            effect = max(effect, pl.shortfall)
        return effect

    def _size(self, effect: float) -> str:
        """The effect a page states, in loss units and against the run's own yardsticks."""
        progress = self._progress()
        share = f", {effect / progress:.1%} of the run's progress" if progress > 0 else ""
        if progress > 0 and effect > 10 * progress:     # not "26274.5%" (BERT's 7.97 -> 14.4)
            share = f", {effect / progress:.0f}x the run's progress ({progress:.3g})"
        return f" [{effect:+.3g}{share}]"

    def _progress(self) -> float:
        """How far the run has come (``effect.state().progress``, without a state)."""
        ef = self._ef
        return ef._progress() if ef._first != NO_STEP else 0.0

    def _rise(self, l_pred) -> float:
        """The deviation of a drift or a plateau in loss units: the level above its best,
        or above the forecast when there is one, whichever is larger. A forecast below
        ``best - progress`` (the run falling further than it has come so far: an
        extrapolation gone wrong, like an exponential law refitted across a 43,000-step
        gap that predicted 0.37 for a t5 loss at 1.8) counts for nothing."""
        ef = self._ef
        up = max(ef._level - ef._best, ef.fast_rise())
        if l_pred is None or l_pred < ef._best - self._progress():
            return up
        return max(up, ef._level - l_pred)

    @cython.locals(dv_active=cython.bint, sp_active=cython.bint, up=cython.double,
                   dv_page=cython.bint, stagnation=cython.bint, drift=cython.bint,
                   shift=cython.bint, slowdown=cython.bint, pl_up=cython.bint,
                   plateau=cython.bint, effect=cython.double, handover=cython.bint)
    def _arbitrate(self, step, loss, fc, pl, fc_alert: bool, pl_active: bool, rising: bool,
                   explained: bool) -> None:
        """Which kinds are active, at which severity. A detector's verdict pages only when
        its deviation is large enough (`effect`); below that it is ``info``. ``rising``
        is rise's verdict, unless the schedule ``explained`` the rise."""
        emitted = self._emitted
        sp, dv, ri = self._sp, self._dv, self._ri
        dv_active = dv.active
        sp_active = sp.active
        dv_sev = "critical"
        up = dv.level - dv.best
        if dv_active and not (self._big("divergence", up) and
                              up > DIVERGENCE_OF_PROGRESS * self._progress()):
            dv_sev = "info"     # a small run-away is at most a drift
        shift = False
        if dv_active:
            # a sustained jump explains the excursion: a level shift (the spike's page),
            # critical once the level has grown by half again since (a run-away) or stands
            # above where the run started (all its progress lost: an MLPerf BERT's eval
            # loss jumped from 7.97 to 14.3, above its first 8.0, and held)
            if (self._dv_at != self._dv_at and sp_active and sp.severity == "warning"
                    and emitted.get("divergence") != [True, "critical"]):
                self._dv_at = up
            shift = up < SHIFT_GROWTH * self._dv_at and dv.level < self._ef._start
            if shift:
                dv_sev = "info"
        else:
            self._dv_at = _NAN
        if (dv_active or self._kinds & _DV) and self._due("divergence", dv_active, dv_sev):
            self._push("divergence", dv_active, dv_sev, step, (
                f"loss level {dv.level:.4g} shifted up from its best {dv.best:.4g} and holds "
                "there (not growing)" if shift else
                f"loss level {dv.level:.4g} ran away from its best {dv.best:.4g}")
                + self._size(up) if dv_active else "")
        dv_page = dv_active and dv_sev == "critical"
        sev: str
        sp_sev = sp.severity       # None, "info" or "warning"
        if sp_sev is not None and sp_sev == "info":
            if self._due("spike", True, "info"):
                self._push("spike", True, "info", step,
                           f"benign spike of {sp.height:+.3g} at step {sp.spike_step}, recovered")
        elif sp_active or self._kinds & _SP:
            sev = "warning" if not sp_active or self._big("spike", sp.height) else "info"
            if self._due("spike", sp_active and not dv_page, sev):
                self._push("spike", sp_active and not dv_page, sev, step,
                           f"loss shifted up by {sp.height:.3g} at step {sp.spike_step} and has "
                           "not come back" + self._size(sp.height)
                           if sp_active and not dv_page else "")
        stagnation = pl_active and pl.rule == "stagnation"
        slowdown = pl_active and pl.rule == "slowdown"
        # a slowdown whose level has risen, before it paged as a plateau, is a rise: a
        # drift. Risen: by more than one unit and STALL_Z of its standard errors since the
        # onset, standing a material amount above where its earlier pace would be; or
        # standing a material amount above its best while it fell under 1 / stall_gate of
        # what its pace promised (a ramp's flat start). The name holds for the slowdown's
        # episode (no flapping between the two while the level hovers around its onset).
        if not slowdown:
            self._pl_mode = 0
        elif self._pl_mode == 0 and (
                (pl.observed < 0 and self._ef.score(-pl.observed) > 1.0
                 and self._big("slowdown", pl.shortfall)
                 and -pl.observed > STALL_Z * pl.observed_sd())
                or (pl.observed * self._ef.stall_gate < pl.expected
                    and self._big("slowdown", self._rise(None)))):
            self._pl_mode = 2
        pl_up = slowdown and self._pl_mode == 2
        drift = (fc_alert or rising or pl_up) and not (stagnation or dv_page or sp_active
                                                        or self._incident("drift"))
        handover = drift
        if drift and slowdown and self._kinds & _PL and emitted["plateau"][0] \
                and emitted["plateau"][1] != "info":
            # a plateau page hands the slowdown over to a drift only once the drift pages:
            # a drift at `info` would resolve the page while the loss climbs on
            handover = self._big("drift", self._drift_effect(fc, pl, fc_alert, rising, pl_up))
        plateau = pl_active and not (slowdown and (handover or dv_page))
        if plateau and (slowdown or stagnation) and self._incident():
            plateau = False     # one incident, one page: the loss-level page carries it
        if plateau or self._kinds & _PL:
            sev = "warning"
            effect = max(self._rise(fc.l_pred), pl.shortfall)
            if plateau and pl.rule not in _NO_LEARNING and not (
                    self._big("slowdown" if slowdown else "plateau", effect) and (
                        not slowdown or self._stalled(
                            pl, -pl.observed > STALL_Z * pl.observed_sd() or (
                                self._ef._lr_peak == 0.0
                                and self._big("slowdown", self._rise(fc.l_pred)))))):
                sev = "info"
            elif plateau and slowdown and self._pl_mode == 0:
                self._pl_mode = 1          # paged as a plateau: so named for the episode
            if self._due("plateau", plateau, sev):
                self._push("plateau", plateau, sev, step, _plateau_msg(pl, fc) + (
                    self._size(effect) if pl.rule not in _NO_LEARNING else "") if plateau else "")
        co = self._co
        if co.active or self._kinds & _DR and emitted["drift"][1] == "critical":
            if self._due("drift", co.active, "critical"):      # a frozen data loader
                self._push("drift", co.active, "critical", step,
                           f"loss {loss:.4g} fell below its course while its batch-to-batch "
                           f"scatter collapsed to {co.scatter:.2%} of its usual size: the same "
                           "batch repeated? (a frozen data loader)" if co.active else "")
            if co.active or emitted["drift"][0]:
                return
        if drift or self._kinds & _DR:
            effect = self._drift_effect(fc, pl, fc_alert, rising, pl_up)
            sev = "warning" if not drift or self._big("drift", effect) else "info"
            if self._due("drift", drift, sev):
                self._push("drift", drift, sev, step, (
                    f"loss {loss:.4g} above its forecast {fc.l_pred or 0:.4g} "
                    f"(band {fc.band_lo or 0:.4g}..{fc.band_hi or 0:.4g}, W={fc.W or 0:.1f})"
                    if fc_alert or explained else f"smoothed loss {ri.level:.4g} rose above its "
                    f"best {ri.best:.4g} (level score {ri.score:.1f}, jump CUSUM {ri.S:.0f}; "
                    "noise units)" if rising else _plateau_msg(pl, fc, True, self._ef._best))
                    + self._size(effect) if drift else "")
