"""The words of a page: one sentence a person reads (what happened, how large in the loss's
units and in % of the run's progress, since which step) and, once it pages, the first
thing to check with its runbook (`check`). The statistics behind it (scores, CUSUMs,
noise units, bands) are the finding's ``details``: ``wtwin monitor --json``, the run
page's alert details, the webhook's ``details`` annotation; never the headline.

Only words: the verdicts are the rules' (`rules`), unchanged.

>>> size(0.21, 1.75)
"0.21 (12% of the run's progress)"
>>> size(6.4, 0.03)
"6.4 (213x the run's progress, 0.03)"
>>> check("drift", "")  # doctest: +ELLIPSIS
'; first check what changed at the onset step ...: https://github.com/wtwin/wtwin/blob/main/docs/runbooks/WTwinLossDegradation.md'
"""

from __future__ import annotations

STALL_Z = 2.0   # `arbiter.STALL_Z`: a level that climbed by more than this is said to rise
RUNBOOKS = "https://github.com/wtwin/wtwin/blob/main/docs/runbooks/"
# per kind: the first thing to check, and the runbook (an alert name of the shipped rules)
CHECKS = {
    "drift": ("what changed at the onset step (the lr schedule, the data shard, a resume, "
              "the grad norm)", "WTwinLossDegradation"),
    "plateau": ("the learning rate and whether the optimizer still steps (a frozen lr, "
                "a zero grad, a loss that is no longer logged)", "WTwinLossDegradation"),
    "overfit": ("the validation split and the regularization; keep the checkpoint with "
                "the best validation loss", "WTwinLossDegradation"),
    "divergence": ("the learning rate and the loss scale (fp16 overflow); roll back to the "
                   "last checkpoint before the onset", "WTwinLossDivergence"),
    "nonfinite": ("the learning rate and the loss scale at the first non-finite step; "
                  "resume from the checkpoint before it", "WTwinLossNonFinite"),
    "spike": ("the batch and the data shard at that step", "WTwinLossSpike"),
    "resume_jump": ("that the checkpoint resumed is the one the run saved last (weights, "
                    "optimizer and data position)", "WTwinResumeJump"),
    "throughput": ("the slowest node's step time and the data loader (its workers, the "
                   "filesystem)", "WTwinRunSlowdown"),
    "memory": ("what a step keeps alive for the next (a loss kept with its graph, a growing "
               "cache); save a checkpoint now", "WTwinMemoryExhaustion"),
    "frozen_loader": ("the data loader's iterator and sampler", "WTwinLossDegradation"),
    "early_rise": ("the lr warm-up's peak and the initial weights (the checkpoint loaded, "
                   "the adapter's init)", "WTwinLossDivergence"),
    "chance": ("that the labels match the inputs and the lr is not zero or huge",
               "WTwinLossAtChance"),
}
_DEFAULT_CHECK = ("the run page and the runbook", "WTwinCriticalAlertsRaised")


def size(effect: float, progress: float) -> str:
    """A deviation in the loss's units and against the run's progress (its start - best)."""
    part = share(effect, progress)
    return f"{effect:.3g} ({part})" if part else f"{effect:.3g}"


def share(effect: float, progress: float) -> str:
    """``effect`` as a part of the run's progress; "" while there is none."""
    if not progress > 0:
        return ""
    if effect > 10 * progress:          # not "26274.5%" (BERT's 7.97 -> 14.4)
        return f"{effect / progress:.0f}x the run's progress, {progress:.3g}"
    part = effect / progress
    return f"{part:.1%} of the run's progress" if part < 0.1 else f"{part:.0%} of the run's progress"


def check(kind: str, grad: str) -> str:
    """The end of a page's sentence: the first thing to check (a grad-norm surge just
    before, when there was one: ``grad``) and the kind's runbook."""
    what, book = CHECKS.get(kind, _DEFAULT_CHECK)
    if grad:
        what = f"the grad norm ({grad}), then {what}"
    return f"; first check {what}: {RUNBOOKS}{book}.md"


def plateau(pl, fc, effect: float, progress: float, rose: bool = False,
            best: float = 0.0) -> tuple:
    """The page of a plateau, from the plateau and forecast detectors' last verdicts, as
    (headline, details); ``rose``: a slowdown whose level has since risen above its
    ``best``, paged as a drift."""
    if pl.rule == "frozen":
        return (f"logged loss frozen at {pl.level!r} (to single precision) for {pl.repeats} "
                "points in a row: the loss stopped updating (often a NaN the logger hides, or "
                "a network that died)",
                f"repeats {pl.repeats}")
    if pl.rule == "no_learning":
        return (f"no learning: loss level {pl.level:.4g} fell only {pl.progress:.2%} since "
                "the start",
                f"progress {pl.progress:.4g} = {pl.progress_z:.1f} times its point-to-point scatter")
    if pl.rule == "slowdown" and pl.expected <= 0.0:     # its onset: nothing measured yet
        return (f"loss {pl.level:.4g} stopped falling at its earlier pace at step {pl.onset}",
                f"shortfall {size(effect, progress)}")
    if pl.rule == "slowdown":
        return _slowdown(pl, rose, best, effect, progress)
    return (f"loss flat at {pl.level:.4g} while its forecast {fc.l_pred or 0:.4g} keeps "
            f"falling, short of it by {size(effect, progress)}",
            f"level {pl.level:.6g}, forecast {fc.l_pred or 0:.6g}, band {fc.band_lo or 0:.6g}"
            f"..{fc.band_hi or 0:.6g}, W={fc.W or 0:.2f}")


def _slowdown(pl, rose: bool, best: float, effect: float, progress: float) -> tuple:
    steps = pl.step - pl.onset
    details = (f"level {pl.level:.6g}, fell {pl.observed:.4g} (sd {pl.observed_sd():.3g}) in "
               f"{steps} steps where its earlier pace promised {pl.expected:.4g}")
    if rose:
        return (f"loss level {pl.level:.4g} rose {size(effect, progress)} above its best "
                f"{best:.4g} since it stopped falling at step {pl.onset}", details)
    if pl.observed < 0 and -pl.observed > STALL_Z * pl.observed_sd():
        # a level that climbed since the onset (a ramp under its drift gate) is said to
        # rise: "stopped improving" alone read as a flat loss
        return (f"loss rose {-pl.observed:.3g} to {pl.level:.4g} in the {steps} steps since "
                f"it stopped improving at step {pl.onset}, {size(effect, progress)} short of "
                "its own earlier pace", details)
    fell = (f"it fell {pl.observed:.3g}" if pl.observed >= 0 else
            f"it did not fall ({-pl.observed:+.2g}, within its noise)")
    return (f"loss stopped improving at {pl.level:.4g}: {fell} in the {steps} steps since step "
            f"{pl.onset}, {size(effect, progress)} short of its own earlier pace", details)


def drift(a, loss: float, effect: float, since) -> tuple:
    """The page of a drift: above its forecast, a smoothed rise, or a risen slowdown, as
    (headline, details)."""
    fc, ri, progress = a.fc, a.ri, a.ef.progress
    if fc.alert or a.explained:
        return (f"loss {loss:.4g} rose above its forecast {fc.l_pred or 0:.4g}, up "
                f"{size(effect, progress)}, since step {since}",
                f"loss {loss:.6g}, forecast {fc.l_pred or 0:.6g}, band {fc.band_lo or 0:.6g}"
                f"..{fc.band_hi or 0:.6g}, W={fc.W or 0:.2f}")
    if a.rising:
        return (f"smoothed loss {ri.level:.4g} rose above its best {ri.best:.4g}, up "
                f"{size(effect, progress)}, since step {since}",
                f"level score {ri.score:.2f}, jump CUSUM {ri.S:.1f} (noise units)")
    return plateau(a.pl, fc, effect, progress, True, a.ef.best)


def divergence(dv, shift: bool, effect: float, progress: float, since) -> tuple:
    if shift:
        return (f"loss level {dv.level:.4g} shifted up {size(effect, progress)} from its best "
                f"{dv.best:.4g} at step {since} and holds there (not growing)",
                f"level {dv.level:.6g}, best {dv.best:.6g}")
    return (f"loss level {dv.level:.4g} ran away from its best {dv.best:.4g}, up "
            f"{size(effect, progress)}, since step {since}",
            f"level {dv.level:.6g}, best {dv.best:.6g}")


def spike(sp, progress: float) -> tuple:
    return (f"loss shifted up by {size(sp.height, progress)} at step {sp.spike_step} and "
            "has not come back", f"height {sp.height:.6g}")


def overfit(ov, effect: float, progress: float, since) -> tuple:
    if ov.quick_hit:
        how = f"its last 2 evals each above its lowest by more than {ov.quick * ov.margin:.4g}"
    else:
        how = (f"mean of its last {ov.span} evals, above its best by more than {ov.margin:.4g} "
               f"for {ov.above} evals in a row")
    return (f"validation loss {ov.val_mean:.4g} rose {size(effect, progress)} above its best "
            f"{ov.best_val:.4g} while the training loss still falls, since step {since}", how)


def resume(rj, step, at, progress: float) -> tuple:
    """The page of a resume: how far the step went back and how far the loss moved."""
    where = f"detectors rewound to step {at}" if at is not None else "detectors started over"
    part = share(abs(rj.jump), progress)
    return (f"step went back from {rj.from_step} to {step} ({where}); the loss moved by "
            f"{rj.jump:+.4g}" + (f" ({part})" if part else ""), f"jump {rj.jump:+.6g}")
