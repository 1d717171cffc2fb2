"""`RunMonitor`: every detector of one run, side by side, behind one small contract.

The daemon's run state only uses this contract:

- ``RunMonitor(preset="pretraining", **overrides)``
- ``update_loss(step, loss, lr=None, grad_norm=None) -> MonitorState``
- ``update_eval(step, metrics) -> MonitorState | None``
- ``snapshot() -> dict`` (msgpack/JSON-safe) and ``restore(snapshot)``

Arbitration (so that one problem gives one page and clean runs stay silent): a sustained
spike or a divergence takes precedence over the forecast's drift; a drift whose loss is
flat where the forecast falls is reported as ``plateau``; a ``plateau`` slowdown (the
decline collapsing) gives way to a drift or a divergence while one is active (a loss that
rises is a drift); benign recovered spikes are ``info``. A warning or critical verdict
then passes the `effect` gate (its deviation in loss units against the run's progress
and wobble: docs/DETECTION.md, "What it takes to page"); below it, it is ``info``.
Findings are emitted when a kind's (active, severity) changes.

Resumes: when the step goes back, the detectors are rewound to their state at the newest
rewind point before it (`rewind`), or started over when there is none, and a
``resume_jump`` finding says which.

Per update it calls each detector's ``observe()`` and reads the attributes it needs: no
state object per detector; the one `MonitorState` it returns is built as a plain tuple.
Compiled (docs/COMPILED.md), its references to the detectors are typed (``monitor.pxd``)
and those calls and reads are C.

Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import functools
import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (detect/_cython_shim.py)
    from . import _cython_shim as cython

from .base import NO_STEP as _NO_STEP, REGISTRY
from .errors import ConfigError
from .finding import Finding, MonitorState
from .presets import PRESET_PARAMS, PRESETS
from .recovery import HELD_KINDS, Recovery
from .rewind import RewindPoints

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

SEVERITY = {"drift": "warning", "plateau": "warning", "divergence": "critical",
            "nonfinite": "critical", "overfit": "warning"}

_NO_LEARNING = ("no_learning", "frozen")
_new = tuple.__new__        # a MonitorState without the NamedTuple's Python-level __new__

# the kinds emitted so far, as bits of ``_kinds`` (a C test per update, not a dict lookup)
_RJ = cython.declare(cython.int, 1)
_NF = cython.declare(cython.int, 2)
_DV = cython.declare(cython.int, 4)
_SP = cython.declare(cython.int, 8)
_PL = cython.declare(cython.int, 16)
_DR = cython.declare(cython.int, 32)
_BIT = {"resume_jump": _RJ, "nonfinite": _NF, "divergence": _DV, "spike": _SP,
        "plateau": _PL, "drift": _DR}


@cython.locals(i=cython.Py_ssize_t)
def _state(fields: tuple):
    """A `MonitorState` from its fields. Compiled, the tuple subtype is allocated and
    filled in place (``tuple.__new__`` parses its arguments and copies the tuple: a
    tenth of an update's instructions)."""
    st = PyType_GenericAlloc(MonitorState, 11)     # noqa: F821  (the C API: monitor.pxd)
    for i in range(11):
        v = fields[i]
        Py_INCREF(v)                               # noqa: F821  (SET_ITEM steals it)
        PyTuple_SET_ITEM(st, i, v)                 # noqa: F821
    return st


if not cython.compiled:     # pure build: tuple.__new__, called from C
    _state = functools.partial(_new, MonitorState)     # noqa: F811


def _build(preset: str, overrides: dict) -> dict:
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {PRESETS}, got {preset!r}")
    spec = {k: dict(v) for k, v in PRESET_PARAMS[preset].items()}
    main = "finetuning" if "finetuning" in spec else "forecast"
    for key, val in overrides.items():
        if isinstance(val, dict):
            if key not in spec:
                raise ConfigError(f"no detector {key!r} in preset {preset!r} (have {sorted(spec)})")
            spec[key].update(val)
        else:
            spec[main][key] = val
    dets = {name: REGISTRY[name](**kw) for name, kw in spec.items()}
    dets["nonfinite"] = REGISTRY["nonfinite"]()
    dets["gradnorm"] = REGISTRY["gradnorm"]()
    dets["collapse"] = REGISTRY["collapse"]()
    return dets


def _obvious_msg(nf, step, loss) -> str:
    """The page of a `nonfinite` verdict (``nf.reason``), or the info of one bad grad norm."""
    r = nf.reason
    if r == "loss":
        return f"loss is {loss} at step {step} (first non-finite at step {nf.first_step})"
    since = nf.grad_since
    if r == "stuck":
        what = "exactly 0.0" if loss == 0.0 else f"frozen at {loss!r}"
        return (f"loss is {what} at step {step} while the grad norm is not finite (since step "
                f"{since}): the weights are probably NaN and the logger hides it")
    if r == "grad":
        return (f"grad norm not finite on {nf.grad_count} logged steps in a row since step "
                f"{since}: the optimizer is not updating (or the weights are NaN)")
    return (f"grad norm not finite at step {step} (one step: an fp16 loss scaler skipping an "
            "overflow does this; it pages if it repeats)")


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
        fell = (f"it fell {pl.observed:.3g}" if pl.observed >= 0 else
                f"it did not fall ({-pl.observed:+.2g})")
        return f"loss stopped improving at {pl.level:.4g}: {fell} {since}"
    return f"loss flat at {pl.level:.4g} while its forecast {fc.l_pred or 0:.4g} keeps falling"


@cython.cclass
class RunMonitor:
    def __init__(self, preset: str = "pretraining", **overrides) -> None:
        self.preset = preset
        self.overrides = overrides
        self._setup(_build(preset, overrides))
        self._emitted = {}
        self._kinds = 0            # _BIT of each kind in _emitted
        self._alert = False        # any warning/critical kind active (follows _emitted)
        self._out = []             # the findings of the update in progress (`_push`)
        self._rec = Recovery()     # the band each page of the loss level left (`recovery`)
        self._held = self._rec.held
        self._points = RewindPoints()   # recent detector states, for resumes (not persisted)
        self._next_at = self._points.next_at
        self.peak_scores = {}      # diagnostics, not state: see ``_big``
        self._dv_at = math.nan     # divergence's excursion when a shift explained it (not state)
        self._pl_mode = 0          # the slowdown episode paged as: 1 plateau, 2 drift (not state)

    def _setup(self, d: dict) -> None:
        """Hold the detectors, and a typed reference to each one the per-event path calls."""
        self._d = d
        self._main = "finetuning" if "finetuning" in d else "forecast"
        self._rj, self._nf, self._gn = d["resume_jump"], d["nonfinite"], d["gradnorm"]
        self._co = d["collapse"]
        self._sp, self._dv, self._ri = d["spike"], d["divergence"], d["rise"]
        self._fc, self._pl, self._ef, self._ov = (
            d[self._main], d["plateau"], d["effect"], d["overfit"])

    @property
    def detectors(self) -> dict:
        return dict(self._d)

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

    @cython.locals(x=cython.double, s=cython.longlong, last=cython.longlong,
                   fc_alert=cython.bint, rising=cython.bint, explained=cython.bint,
                   pl_active=cython.bint, judging=cython.bint, on=cython.bint)
    def update_loss(self, step: int, loss: float, lr: float | None = None,
                    grad_norm: float | None = None) -> MonitorState:
        out = self._out         # this update's findings (`_push`): one list, emptied here
        if out:
            del out[:]
        loss = float(loss)
        if lr is not None and lr < 0:
            lr = None       # no schedule has one (the laws take its log): read as unknown
        x = loss
        s = step
        last = self._rj._last_step
        where = ""
        at = None
        if last != NO_STEP and s < last:
            at = self._rewind(s)
            self._rj.observe_resumed(s, x, last)
        else:
            self._rj.observe(s, x)
        nf = self._nf
        if grad_norm is not None:
            grad_norm = float(grad_norm)
            self._gn.observe(s, grad_norm)
        nf.observe(s, x, grad_norm)
        rj = self._rj
        sev: str
        if rj.active:
            sev = rj.severity
            if not (sev == "info" or self._big("resume_jump", abs(rj.jump))):
                sev = "info"
            if self._due("resume_jump", True, sev):
                where = (f"detectors rewound to step {at}" if at is not None
                         else "detectors started over")
                self._push("resume_jump", True, sev, step,
                           f"step went back from {rj.from_step} to {step}; loss moved by "
                           f"{rj.jump:+.4g} ({where})")
        elif self._kinds & _RJ and self._due("resume_jump", False, "info"):
            self._push("resume_jump", False, "info", step, "")
        on = nf.active or nf.grad_bad
        if on or self._kinds & _NF:
            sev = "critical" if nf.active else "info"
            if self._due("nonfinite", on, sev):
                self._push("nonfinite", on, sev, step, _obvious_msg(nf, step, loss) if on else "")
        if nf.blown and self._due("divergence", True, "critical"):    # resolved by `_arbitrate`
            self._push("divergence", True, "critical", step,
                       f"loss {loss:.4g} is {abs(loss) / nf._ref:.3g} times the largest loss of the "
                       f"run's first {nf._n_ref} points ({nf._ref:.4g}): it blew up")
        if nf.active or nf.blown:
            return _state((step, loss, None, None, None, None, None, None, None, True, tuple(out)))
        fc = self._fc
        fc.observe(step, loss, lr)
        sp = self._sp
        dv = self._dv
        ri = self._ri
        sp.observe(s, x)
        dv.observe(s, x)
        ri.observe(s, x)
        self._co.observe(s, x)
        l_pred = fc.l_pred
        alert = fc.alert
        fc_alert = alert
        pl = self._pl
        pl.observe(s, x, l_pred, fc_alert)
        self._ov.update_train(s, x)
        rising = ri.active     # False once the schedule explained the rise
        explained = False
        if rising and lr is not None:
            band_hi = fc.band_hi
            # lr known: a rise the schedule explains (the forecast rose by a quarter of
            # it, and the level is within the band) is no drift; a wide band alone is not
            # an explanation (it silenced every rise of a young forecast)
            if (band_hi is not None and ri.level <= band_hi
                    and self._ef.forecast_rise(l_pred, lr) >= 0.25 * (ri.level - ri.best)):
                ri.rebase()    # the schedule moved the loss: a new best from here
                rising, explained = False, True
        pl_active = pl.active
        judging = (fc_alert or dv.active or sp.active or rising
                   or (pl_active and pl.rule not in _NO_LEARNING))
        self._ef.feed(step, loss, judging, l_pred, lr)
        self._arbitrate(step, loss, fc, pl, fc_alert, pl_active, rising, explained)
        if self._held:          # a page of the loss level waits for it to come back
            self._rec.observe(x)
            self._escalate(step)
        if s >= self._next_at:
            self._points.take(step, self._d)
            self._next_at = self._points.next_at
        return _state((step, loss, l_pred, fc.band_lo, fc.band_hi, fc.D, fc.Q, fc.T, fc.W,
                       self._alert, tuple(out) if out else ()))

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

    def _size(self, effect: float) -> str:
        """The effect a page states, in loss units and against the run's own yardsticks."""
        progress = self._progress()
        share = f", {effect / progress:.1%} of the run's progress" if progress > 0 else ""
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

    def _rewind(self, step: int):
        """Detectors as they stood at the newest rewind point before ``step`` (fresh ones
        when there is none); returns that point's step. The emitted kinds are kept, so a
        kind active before the resume and not at the point is resolved by the next update."""
        point = self._points.before(step)
        self._next_at = self._points.next_at
        self._setup(_build(self.preset, self.overrides))
        if point is None:
            return None
        for k, snap in point[1].items():
            self._d[k].restore(snap)
        return point[0]

    @cython.locals(dv_active=cython.bint, sp_active=cython.bint, up=cython.double,
                   dv_page=cython.bint, stagnation=cython.bint, drift=cython.bint,
                   shift=cython.bint, slowdown=cython.bint, pl_up=cython.bint,
                   plateau=cython.bint, effect=cython.double)
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
                 and self._big("plateau", pl.shortfall)
                 and -pl.observed > STALL_Z * pl.observed_sd())
                or (pl.observed * self._ef.stall_gate < pl.expected
                    and self._big("plateau", self._rise(None)))):
            self._pl_mode = 2
        pl_up = slowdown and self._pl_mode == 2
        drift = (fc_alert or rising or pl_up) and not (stagnation or dv_page or sp_active
                                                        or self._incident("drift"))
        plateau = pl_active and not (slowdown and (drift or dv_page))
        if plateau and (slowdown or stagnation) and self._incident():
            plateau = False     # one incident, one page: the loss-level page carries it
        if plateau or self._kinds & _PL:
            sev = "warning"
            effect = max(self._rise(fc.l_pred), pl.shortfall)
            if plateau and pl.rule not in _NO_LEARNING and not (
                    self._big("plateau", effect) and (not slowdown or self._stalled(
                        pl, -pl.observed > STALL_Z * pl.observed_sd() or (self._ef._lr_peak == 0.0
                            and self._big("plateau", self._rise(fc.l_pred)))))):
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
            effect = self._rise(fc.l_pred if fc_alert else None)
            if pl_up and not (fc_alert or rising):
                effect = max(effect, pl.shortfall)
            sev = "warning" if not drift or self._big("drift", effect) else "info"
            if self._due("drift", drift, sev):
                self._push("drift", drift, sev, step, (
                    f"loss {loss:.4g} above its forecast {fc.l_pred or 0:.4g} "
                    f"(band {fc.band_lo or 0:.4g}..{fc.band_hi or 0:.4g}, W={fc.W or 0:.1f})"
                    if fc_alert or explained else f"smoothed loss {ri.level:.4g} rose above its "
                    f"best {ri.best:.4g} (level score {ri.score:.1f}, jump CUSUM {ri.S:.0f}; "
                    "noise units)" if rising else _plateau_msg(pl, fc, True, self._ef._best))
                    + self._size(effect) if drift else "")

    def update_eval(self, step: int, metrics: dict) -> MonitorState | None:
        val = next((metrics[k] for k in ("val_loss", "eval_loss", "loss") if k in metrics), None)
        if val is None:
            return None
        val, out = float(val), []
        self._out = out
        if not math.isfinite(val):
            if self._due("nonfinite", True, "critical"):
                self._push("nonfinite", True, "critical", step,
                           f"validation loss is {val} at step {step}")
            return MonitorState(step=step, l_obs=val, alert=True, findings=tuple(out))
        ov = self._ov
        ov.observe(step, val)
        if self._due("overfit", ov.active, "warning"):
            self._push("overfit", ov.active, "warning", step,
                       f"validation loss {ov.val_mean:.4g} (mean of its last {ov.span} evals) "
                       f"has stood above its best {ov.best_val:.4g} by more than {ov.margin:.3g} "
                       f"for {ov.above} evals in a row while the training loss still falls"
                       if ov.active else "")
        return MonitorState(step=step, l_obs=val, alert=self._alert, findings=tuple(out))

    def snapshot(self, copy: bool = True) -> dict:
        """Plain values; ``copy=False`` shares the detectors' live state with a caller that
        serializes it at once (see `Detector.snapshot`)."""
        return {"v": 1, "preset": self.preset, "overrides": dict(self.overrides),
                "emitted": {k: list(v) for k, v in self._emitted.items()},
                "recovery": self._rec.snapshot(),
                "detectors": {k: det.snapshot(copy) for k, det in self._d.items()}}

    def restore(self, snap: dict) -> None:
        if snap.get("v") != 1 or "detectors" not in snap:
            raise ConfigError("monitor snapshot is not version 1")
        self.__init__(snap["preset"], **snap.get("overrides", {}))
        self._emitted = {k: list(v) for k, v in snap["emitted"].items()}
        for k in self._emitted:
            self._kinds |= _BIT.get(k, 0)
        self._alert = any(v[0] and v[1] != "info" for v in self._emitted.values())
        self._rec.restore(snap.get("recovery", {}))
        for k, s in snap["detectors"].items():
            self._d[k].restore(s)


class WTwinMonitor(RunMonitor):
    """Seed-compatible in-process monitor: ``WTwinMonitor(preset).update(step, loss)``.

    >>> import random
    >>> rng = random.Random(0)
    >>> mon = WTwinMonitor(preset="pretraining")
    >>> caught = None
    >>> for t in range(1, 8001):
    ...     loss = 2.5 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05) + max(0.0, t - 5000) * 1e-4
    ...     if mon.update(t, loss).alert and caught is None:
    ...         caught = t
    >>> 5000 < caught < 6000
    True
    """

    def update(self, step: int, loss: float, lr: float | None = None) -> MonitorState:
        return self.update_loss(step, loss, lr)
