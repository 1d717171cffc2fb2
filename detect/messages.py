"""The words of a page whose message is more than one line of a rule (`rules`): a plateau's
four rules, and a slowdown whose level has since risen (paged as a drift)."""

from __future__ import annotations

STALL_Z = 2.0   # `arbiter.STALL_Z`: a level that climbed by more than this is said to rise


def plateau(pl, fc, rose: bool = False, best: float = 0.0) -> str:
    """The page of a plateau, from the plateau and forecast detectors' last verdicts;
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
        return _slowdown(pl, rose, best)
    return f"loss flat at {pl.level:.4g} while its forecast {fc.l_pred or 0:.4g} keeps falling"


def _slowdown(pl, rose: bool, best: float) -> str:
    since = (f"in the {pl.step - pl.onset} steps since step {pl.onset}, where its own "
             f"earlier pace would have taken it {pl.expected:.3g} lower")
    if rose:
        return (f"loss level {pl.level:.4g} rose above its best {best:.4g} after it stopped "
                f"falling at step {pl.onset} (its own earlier pace would have taken it "
                f"{pl.expected:.3g} lower since)")
    if pl.observed < 0 and -pl.observed > STALL_Z * pl.observed_sd():
        # a level that climbed since the onset (a ramp under its drift gate) is said to
        # rise: "stopped improving" alone read as a flat loss
        return (f"loss rose {-pl.observed:.3g} to {pl.level:.4g} in the {pl.step - pl.onset} "
                f"steps since it stopped improving at step {pl.onset}, where its own earlier "
                f"pace would have taken it {pl.expected:.3g} lower")
    fell = (f"it fell {pl.observed:.3g}" if pl.observed >= 0 else
            f"it did not fall ({-pl.observed:+.2g}, within its noise)")
    return f"loss stopped improving at {pl.level:.4g}: {fell} {since}"


def drift(a, loss: float) -> str:
    """The page of a drift: above its forecast, a smoothed rise, or a risen slowdown."""
    fc, ri = a.fc, a.ri
    if fc.alert or a.explained:
        return (f"loss {loss:.4g} above its forecast {fc.l_pred or 0:.4g} "
                f"(band {fc.band_lo or 0:.4g}..{fc.band_hi or 0:.4g}, W={fc.W or 0:.1f})")
    if a.rising:
        return (f"smoothed loss {ri.level:.4g} rose above its best {ri.best:.4g} (level score "
                f"{ri.score:.1f}, jump CUSUM {ri.S:.0f}; noise units)")
    return plateau(a.pl, fc, True, a.ef.best)


def divergence(dv, shift: bool) -> str:
    if shift:
        return (f"loss level {dv.level:.4g} shifted up from its best {dv.best:.4g} and holds "
                "there (not growing)")
    return f"loss level {dv.level:.4g} ran away from its best {dv.best:.4g}"
