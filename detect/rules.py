"""The arbitration of one run, as named rules: from the detectors' verdicts to which kinds
are active, at which severity, so that one problem gives one page and clean runs stay
silent. `judge` runs them in order, once per loss update that passed `obvious`:

1. `divergence`: a level that ran away pages critical; one a sustained jump explains is
   a level `shift` (the spike's page);
2. `spike`: a jump that has not come back; a benign recovered one is ``info``;
3. `slowdown_name`: a slowdown whose level rose is a drift, not a plateau (`Episode`);
   `drift_due`: whether a drift is due, and whether it takes a plateau's page over;
4. `plateau`: learning stopped, unless an incident of the loss level pages;
5. `own_pages`: a detector of a kind no rule names pages its own verdict (the frozen
   data loader); then the drift under it is not a second page;
6. `drift`: above the forecast, a smoothed rise, a risen slowdown; one `escalated` to
   critical is held until the loss comes back.

Beside them, first in `judge`: `timing`, the run's time and memory (a slowdown of its
steps, memory on its way to an OOM), paged on their own verdicts and never weighed
against the loss's. While a detector whose page says the whole incident (``ABSORBS``:
the model at chance) pages critical, the rules of the loss level open no page beside it
(`absorbed`, asked only by a rule about to open one).

Before them, per update: `resume` (the step went back), `obvious` (a non-finite or
blown-up loss: the update stops there), `schedule` (a rise the lr schedule explains).
A verdict pages only when its deviation is large enough (`effect`, `Arbiter.big`); below
that it is ``info``. Pure: no I/O, no clock, no logging.
"""

from __future__ import annotations

import math

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

from . import messages
from .base import Detector
from .arbiter import BITS, STALL_Z

if not cython.compiled:        # compiled: C ints, cimported in rules.pxd
    from .arbiter import AS_DRIFT, AS_PLATEAU, UNNAMED

# a critical divergence has run away by at least this fraction of the run's progress
DIVERGENCE_OF_PROGRESS = 0.1
# a divergence that a sustained jump explains is a level shift (warning) until the level
# has grown this much again since it became active (then it runs away: critical)
SHIFT_GROWTH = 1.5
# ... or until it has given back this fraction of the run's progress: a jump that undoes
# half of what the run learned is critical however flat it holds (an MLP whose lr jumped
# from 0.01 to 1.0: its loss from 0.056 to about 1.5 of a 2.3 start, a warning for 500 steps)
SHIFT_LOST = 0.5
NO_LEARNING = ("no_learning", "frozen")
# a forecast's alarm with no lr sent and the level within this many units of its best is a
# slower descent, not a drift (`slower_only`)
SLOWER_UNITS = 0.5
DRIFT_GIVES_WAY = ("spike", "divergence")   # a drift beside these pages is their level
_NAN = cython.declare(cython.double, math.nan)
# the bits of the kinds the rules judge, in `Arbiter.ever`
_RJ = cython.declare(cython.int, BITS["resume_jump"])
_NF = cython.declare(cython.int, BITS["nonfinite"])
_DV = cython.declare(cython.int, BITS["divergence"])
_SP = cython.declare(cython.int, BITS["spike"])
_PL = cython.declare(cython.int, BITS["plateau"])
_DR = cython.declare(cython.int, BITS["drift"])
_TP = cython.declare(cython.int, BITS["throughput"])
_MEM = cython.declare(cython.int, BITS["memory"])


def resume(a, p) -> None:
    """The step went back (a resume or a restart from a checkpoint): say how far the loss
    moved, and where the detectors were rewound to (`rewind`)."""
    rj = a.rj
    if rj.active:
        sev = rj.severity
        if not (sev == "info" or a.big("resume_jump", abs(rj.jump))):
            sev = "info"
        if a.due("resume_jump", True, sev):
            head, det = messages.resume(rj, p.step, a.rewound_to, a.ef.progress)
            a.push("resume_jump", True, sev, p.step, head, det)
    elif a.ever & _RJ and a.due("resume_jump", False, "info"):
        a.push("resume_jump", False, "info", p.step, "")


@cython.locals(on=cython.bint)
def obvious(a, p) -> bool:
    """A non-finite loss (or a loss frozen under non-finite grad norms) pages critical at
    once, and so does a loss that blew up by orders of magnitude (LR x100: 2e8 times its
    first points). Such a point stops the update: it is kept out of the other detectors."""
    nf = a.nf
    on = nf.active or nf.grad_bad
    if on or a.ever & _NF:
        sev = "critical" if nf.active else "info"
        if a.due("nonfinite", on, sev):
            a.push("nonfinite", on, sev, p.step, nf.message(p.step, p.loss) if on else "")
    if nf.blown and a.due("divergence", True, "critical"):    # resolved by `divergence`
        a.push("divergence", True, "critical", p.step, nf.blown_message(p.step, p.loss))
    return nf.active or nf.blown


def schedule(a, p) -> None:
    """With the lr known, a rise the schedule explains is no drift: the forecast rose by a
    quarter of it and the level is within the band (a warm restart, a WSD re-warm). A wide
    band alone is not an explanation (it silenced every rise of a young forecast)."""
    ri, fc = a.ri, a.fc
    a.rising = ri.active
    a.explained = False
    if a.rising and p.lr is not None:
        band_hi = fc.band_hi
        if (band_hi is not None and ri.level <= band_hi
                and a.ef.forecast_rise(p.l_pred, p.lr) >= 0.25 * (ri.level - ri.best)):
            ri.rebase()    # the schedule moved the loss: a new best from here
            a.rising, a.explained = False, True


def judging(a, p) -> bool:
    """Is a verdict of the loss level active (the `effect` level then holds its yardsticks)?"""
    pl = a.pl
    if not a.ef.falls:
        return a.dv.active or a.sp.active
    return (p.fc_alert or a.dv.active or a.sp.active or a.rising
            or (pl.active and pl.rule not in NO_LEARNING))


def judge(a, p) -> None:
    """The named rules, in order (the module's docstring says why each comes where). A
    loss that is not meant to fall (`effect.falls`: an RL value loss, a GAN's) is judged
    on its run-aways and sustained jumps alone, in units of its own wobble: its drifts and
    plateaus are its nature (a GAN generator's loss rises as its discriminator learns)."""
    timing(a, p, a.tp, "throughput", _TP)
    timing(a, p, a.mem, "memory", _MEM)
    divergence(a, p)
    spike(a, p)
    if a.ef.falls:
        slowdown_name(a, p)
        drift_due(a, p)
        plateau(a, p)
        if not own_pages(a, p):
            drift(a, p)
    else:
        own_pages(a, p)


@cython.locals(active=cython.bint)
def timing(a, p, det, kind: str, bit: int) -> None:
    """The run's time or memory pages its detector's verdict at the severity it asks for:
    a straggler or a starved data loader slows every step while the loss looks healthy,
    and a leak kills the job with a CUDA OOM hours after its last checkpoint. It is no
    incident of the loss (a loss page beside it is a second problem) and none of the loss
    rules gives way to it."""
    active = det.asks()
    if active or a.ever & bit:
        v = det.verdict()
        if a.due(kind, v.active, v.severity):
            a.push(kind, v.active, v.severity, p.step, det.message(p.step, p.x) if v.active else "")


@cython.locals(dv_active=cython.bint, up=cython.double, shifted=cython.bint)
def divergence(a, p) -> None:
    """A level that ran away from its best pages critical once it is material and over a
    tenth of the run's progress (a small run-away is at most a drift); a `shift` is a
    warning, the spike's page. Shuffled labels, LR blow-ups, fp16 overflows."""
    dv = a.dv
    dv_active = dv.active
    sev = "critical"
    up = dv.level - dv.best
    if dv_active and not (a.big("divergence", up) and
                          up > DIVERGENCE_OF_PROGRESS * a.ef.progress):
        sev = "info"
    shifted = False
    if dv_active:
        shifted = shift(a, up)
        if shifted or absorbed(a, "divergence"):
            sev = "info"
    else:
        a.episode.shift_from = _NAN
    if (dv_active or a.ever & _DV) and a.due("divergence", dv_active, sev):
        if dv_active:
            head, det = messages.divergence(dv, shifted, up, a.ef.progress,
                                            a.onset("divergence", p.step))
            a.push("divergence", True, sev, p.step, head, det)
        else:
            a.push("divergence", False, sev, p.step, "")
    a.dv_page = dv_active and sev == "critical"


def absorbed(a, kind: str) -> bool:
    """A critical page that says the whole incident fires (a detector's ``ABSORBS``: the
    model at chance): the rules of the loss level open no page of ``kind`` beside it (a
    language model that collapsed to ln 32000 paged `chance`, then `spike`, `plateau` and
    `divergence` within 30 steps); a page they opened before it keeps paging. Not the
    frozen data loader's: a dead network's loss frozen in its ninth digit pages it first,
    and then `plateau`'s "frozen", the better diagnosis."""
    return ((a.ever & a.absorbing_bits) != 0 and a.paging(a.absorbing, True)
            and not a.paging((kind,)))


@cython.locals(up=cython.double)
def shift(a, up: float) -> bool:
    """A sustained jump explains the excursion: a level shift, until the level has grown
    by half again since (a run-away) or has given back half the run's progress (an
    MLPerf BERT's eval loss jumped from 7.97 to 14.3, above its first 8.0, and held)."""
    ep = a.episode
    if (ep.shift_from != ep.shift_from and a.sp.active and a.sp.severity == "warning"
            and a.emitted.get("divergence") != [True, "critical"]):
        ep.shift_from = up
    return up < SHIFT_GROWTH * ep.shift_from and up < SHIFT_LOST * a.ef.progress


@cython.locals(active=cython.bint)
def spike(a, p) -> None:
    """A jump that has not come back pages (a warning, when large enough and no critical
    divergence says it); one that came back within its detector's reach is a benign
    ``info`` (real logs have one-batch outliers)."""
    sp = a.sp
    sev = sp.severity       # None, "info" or "warning"
    if sev is not None and sev == "info":
        if a.due("spike", True, "info"):
            a.push("spike", True, "info", p.step,
                   f"benign spike of {sp.height:+.3g} at step {sp.spike_step}, recovered",
                   f"height {sp.height:.6g}")
    elif sp.active or a.ever & _SP:
        sev = "warning" if not sp.active or (a.big("spike", sp.height)
                                             and not absorbed(a, "spike")) else "info"
        active = sp.active and not a.dv_page
        if a.due("spike", active, sev):
            if active:
                head, det = messages.spike(sp, a.ef.progress)
                a.push("spike", True, sev, p.step, head, det)
            else:
                a.push("spike", False, sev, p.step, "")


def slowdown_name(a, p) -> None:
    """A slowdown whose level has risen, before it paged as a plateau, is a rise: a drift
    (a ramp's flat start). Risen: by more than one unit and `STALL_Z` of its standard
    errors since the onset, a material amount above where its earlier pace would be; or
    a material amount above its best while it fell under 1 / stall_gate of what its pace
    promised. The name holds for the episode."""
    pl, ef, ep = a.pl, a.ef, a.episode
    a.stagnation = pl.active and pl.rule == "stagnation"
    a.slowdown = pl.active and pl.rule == "slowdown"
    if not a.slowdown:
        ep.slowdown_as = UNNAMED
    elif ep.slowdown_as == UNNAMED and (
            (pl.observed < 0 and ef.score(-pl.observed) > 1.0 and a.big("slowdown", pl.shortfall)
             and -pl.observed > STALL_Z * pl.observed_sd())
            or (pl.observed * ef.stall_gate < pl.expected and a.big("slowdown", a.rise(None)))):
        ep.slowdown_as = AS_DRIFT
    a.pl_up = a.slowdown and ep.slowdown_as == AS_DRIFT


def drift_due(a, p) -> None:
    """Is a drift due: the forecast alarms, the level rose, or a slowdown rose; unless a
    stagnation, a critical divergence or a spike says it, or a page of theirs fires
    (shuffled labels paged a `drift` beside their divergence, 380 steps later)."""
    a.drift = (p.fc_alert or a.rising or a.pl_up) and not (
        a.stagnation or a.dv_page or a.sp.active or a.paging(DRIFT_GIVES_WAY))
    a.handover = a.drift
    if a.drift and a.slowdown and a.ever & _PL:
        pv = a.emitted["plateau"]
        if pv[0] and pv[1] != "info":
            # a plateau page hands the slowdown over to a drift only once the drift
            # pages: a drift at `info` would resolve the page while the loss climbs on
            a.handover = a.big("drift", a.drift_effect())


@cython.locals(on=cython.bint, effect=cython.double)
def plateau(a, p) -> None:
    """Learning stopped: no progress, a frozen logged loss, a slowdown that stalled the run
    (`Arbiter.stalled`), a stagnation under a falling forecast. No progress while the lr
    still rises is a warm-up's (a DeBERTa fine-tune sat at 1.39 until its lr neared its
    peak at step 1,300, then fell to 0.7): ``info`` until the lr stops rising. One
    incident, one page:
    a slowdown or stagnation under a page of the loss level is that page's flat tail (LR
    x100 and shuffled labels paged `plateau` beside their critical divergence); a
    stagnation during a forecast alarm that already paged a drift is that drift's flat
    tail, even once the drift resolved (a data-order bump +0.09 paged `drift`, came back
    within its band, then paged `plateau` under the same alarm)."""
    pl = a.pl
    on = pl.active and not (a.slowdown and (a.handover or a.dv_page))
    if on and (a.slowdown or a.stagnation) and a.paging(a.incidents):
        on = False
    if on and a.stagnation and a.episode.fc_drift:
        on = False
    if on or a.ever & _PL:
        sev = "warning"
        effect = max(a.rise(a.fc.l_pred), pl.shortfall)
        if on and pl.rule == "no_learning" and a.ef.lr_rising:
            sev = "info"        # the warm-up has not given the run its lr yet
        elif on and pl.rule not in NO_LEARNING and not (
                a.big("slowdown" if a.slowdown else "plateau", effect)
                and (not a.slowdown or a.stalled(pl, stalled_risen(a)))):
            sev = "info"
        elif on and absorbed(a, "plateau"):
            sev = "info"
        elif on and a.slowdown and a.episode.slowdown_as == UNNAMED:
            a.episode.slowdown_as = AS_PLATEAU  # paged as a plateau: so named for the episode
        if a.due("plateau", on, sev):
            if on:
                head, det = messages.plateau(pl, a.fc, effect, a.ef.progress)
                a.push("plateau", True, sev, p.step, head, det)
            else:
                a.push("plateau", False, sev, p.step, "")


def stalled_risen(a) -> bool:
    """A slowdown stands on evidence of its own (`Arbiter.stalled`'s ``risen``): its level
    climbed beyond its noise, or, with no lr known, stands a material amount above its
    best or its forecast."""
    pl = a.pl
    return -pl.observed > STALL_Z * pl.observed_sd() or (
        a.ef.lr_peak == 0.0 and a.big("slowdown", a.rise(a.fc.l_pred)))


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(stop=cython.bint, active=cython.bint, det=Detector, i=cython.Py_ssize_t)
def own_pages(a, p) -> bool:
    """A detector of a kind no rule names pages its own verdict, at the severity it asks
    for: the frozen data loader (an MLP on load_digits fed one batch: critical). While one
    is active, the fall below the course it explains is not a second page: the rules after
    it do not run (True). One that has not paged yet gives way to a critical page of the
    kinds it names (``GIVES_WAY``): an early rise of a run that never made progress, when
    its run-away already pages `divergence` (a t5 fine-tune, 1.99 to 1.74, diverged at
    70% of its 430 points: divergence critical, then early_rise critical)."""
    stop = False
    for i in range(len(a.own)):
        det = cython.cast(Detector, a.own[i])      # `Arbiter.attach`: the monitor's detectors
        active = det.asks()
        kind = a.own_kinds[i]
        stop = stop or active
        if active and a.own_gives_way[i] and a.paging(a.own_gives_way[i], True) and not a.paging((kind,)):
            continue
        if active or (a.ever and kind in a.emitted):
            v = det.verdict()
            if a.due(kind, v.active, v.severity):
                a.push(kind, v.active, v.severity, p.step,
                       det.message(p.step, p.x) if v.active else "")
    return stop


@cython.locals(effect=cython.double)
def drift(a, p) -> None:
    """The loss rose: above its forecast's band, a smoothed rise over its best (`rise`), or
    a slowdown whose level rose. Pages when the rise is material (`Arbiter.big`), and not
    when it only fell more slowly than a law that cannot see its schedule (`slower_only`).
    Once it pages, the episode is the drift's: the slowdown under it (named so for the
    rest of its episode) and the forecast's alarm (``fc_drift``) do not page `plateau`
    again when the drift comes back within its band (a modded-nanogpt ramp paged plateau,
    drift, then plateau again for the slowdown that began at the same step)."""
    if (a.drift or a.ever & _DR) and not escalated(a, p):
        effect = a.drift_effect()
        sev = "warning" if not a.drift or (a.big("drift", effect) and not slower_only(a, p)) else "info"
        if a.due("drift", a.drift, sev):
            if a.drift:
                head, det = messages.drift(a, p.x, effect, a.onset("drift", p.step))
                a.push("drift", True, sev, p.step, head, det)
            else:
                a.push("drift", False, sev, p.step, "")
    if a.ever & _DR and a.paging(("drift",)):
        if a.slowdown:      # the slowdown's episode is a drift's from here (`slowdown_name`)
            a.episode.slowdown_as = AS_DRIFT
        if p.fc_alert:
            a.episode.fc_drift = True
    if not p.fc_alert:
        a.episode.fc_drift = False


def slower_only(a, p) -> bool:
    """The forecast alarms alone, no lr was ever sent, and the level stands within half a
    unit of its best: the loss still makes its lows, only more slowly than the law says.
    A law fitted without the lr cannot see a schedule that flattens the end of a run (a
    cosine decay to a tenth: 618-point LLM runs paged a drift in their last 300 steps),
    and a stop is the stagnation's page (`plateau`), not this one. The cost: a fault that
    only slows the descent, with no lr sent, waits until the level rises or stops."""
    ef = a.ef
    return (p.fc_alert and not (a.rising or a.pl_up) and ef.lr_peak == 0.0
            and ef.score(max(ef.level - ef.best, ef.fast_rise())) < SLOWER_UNITS)


def escalated(a, p) -> bool:
    """A drift escalated to critical (`Arbiter.escalate`: the loss did not come back) is
    held by its recovery alone: it resolves once the loss is back in the band it left,
    whatever the drift's detectors say meanwhile, and they are not scored for it."""
    if not a.ever & _DR:
        return False
    v = a.emitted["drift"]
    if v[1] != "critical":
        return False
    if a.due("drift", False, "critical"):
        a.push("drift", False, "critical", p.step, "")
    return a.emitted["drift"][0]


def evaluation(a, step, val: float) -> None:
    """An eval's loss: not finite pages critical; above its best while the training loss
    still falls, a warning (`overfit`)."""
    if not math.isfinite(val):
        if a.due("nonfinite", True, "critical"):
            a.push("nonfinite", True, "critical", step, f"validation loss is {val} at step {step}")
        return
    ov = a.ov
    ov.observe(step, val)
    if a.due("overfit", ov.active, "warning"):
        if ov.active:
            head, det = messages.overfit(ov, ov.val_mean - ov.best_val, a.ef.progress,
                                         a.onset("overfit", step))
            a.push("overfit", True, "warning", step, head, det)
        else:
            a.push("overfit", False, "warning", step, "")
