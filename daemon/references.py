"""Reference runs, the daemon's side (docs/REFERENCES.md; the detector: detect/reference.py).

A run_start may name runs the run should match (``reference``) and a ``group`` (its
siblings are the group's other runs in memory). ``References.start`` resolves each name
into a ``ReferenceCurve``: from the live run's plot series (``RunSeries.train``), else
from the store's full history (``series_rows``, read on the writer thread, off the
loop), decimated to at most ``max_points`` points. A name that resolves to nothing (no
such run, or fewer than 2 finite losses) is a plain warning: logged, counted, and sent
to the trainer as an ``alert`` reply of kind ``reference_missing`` (its ``on_alert``);
the run is not refused and is monitored as usual.

The run holds a ``RunReference`` (``RunState.refs``): the names, the group and the
``ReferenceTracker``. ``RunReference.update`` is the per-loss cost: one ``feed`` of the
tracker; a verdict (and a ``behind`` finding for the run's alert policy) is built only
while behind or on the update it resolves. Its snapshot (the names, the group, the
tracker's state) is in the run's; after a restart the names are resolved again and the
tracker's state restored into the new tracker when the references are the same.

References stay inside a principal (issue 38): a run compares only with runs of its own
principal (its CURVE key, or its secret) and runs whose name matches ``[runs] shared``.
Another principal's run, named or a sibling of the group, is ignored and counted
(``wtwind_references_foreign_total``); a named one is warned of in the very words of a
name that does not exist (``NOT_KNOWN``), so neither its curve, its level nor its
existence reaches the other principal.

References are not fixed once resolved: a run whose references are incomplete (a named
one missing, or one still running and growing) looks again on a bounded schedule
(``resolve_s``, doubling to ``MAX_RESOLVE_S``), and at once when a sibling of its group
ends; a new sibling's ``run_start`` brings the next look forward. When the curves
changed, a new tracker replaces the old one, warmed on the run's own series.
"""

from __future__ import annotations

import math
import time
from fnmatch import fnmatchcase
from typing import Callable

import numpy as np
import structlog
from prometheus_client.core import CounterMetricFamily

from wtwin.detect.alert import Alert
from wtwin.detect.finding import Finding
from wtwin.detect.reference import ReferenceConfig, ReferenceCurve, ReferenceTracker
from wtwin.emitters import wire

log = structlog.get_logger("wtwind.references")
NAN = math.nan
BEHIND = 1                  # detect.reference.STATES.index("behind")
SCHEDULE = 2                # detect.reference.STATES.index("schedule_differs")
MAX_REFERENCES = 4          # references a run may name (more: the first ones, and a warning)
MAX_POINTS = 2048           # points kept of a reference's curve
RESOLVE_S = 60.0            # an incomplete run's references are looked up again after this ...
MAX_RESOLVE_S = 960.0       # ... doubling each time up to this
NOT_KNOWN = "is not a run this daemon knows"  # no such run, or another principal's: the same words
OVER_BUDGET = "does not fit in the daemon's reference budget ([runs] max_reference_points)"


def _same_curves(a: list, b: list) -> bool:
    """The same reference curves: names, lengths and last steps (a grown run is other)."""
    return len(a) == len(b) and all((x.name, len(x), x.steps[-1]) == (y.name, len(y), y.steps[-1])
                                    for x, y in zip(a, b))


class RunReference:
    """What one run holds: the names it asked for, its group, and the tracker once the
    references are resolved (None until then, or when none resolved). ``refresh(step)``
    (set by `References.start`) looks the references up again once ``due`` (a time)."""

    __slots__ = ("names", "group", "tracker", "frozen", "_behind", "due", "every", "warned", "refresh",
                 "tell", "told")

    def __init__(self, names: list[str], group: str | None, frozen: dict | None = None) -> None:
        self.names, self.group, self.frozen = names, group, frozen
        self.tracker: ReferenceTracker | None = None
        self._behind = False
        self.due, self.every, self.warned = math.inf, 0.0, frozenset()
        self.refresh: Callable[[int], None] | None = None
        # ``tell(message)``: an info to the trainer (set by `References.resolve`); ``told``:
        # the run's lr schedule was said to differ from its reference's (once a run)
        self.tell: Callable[[str], None] | None = None
        self.told = False

    @property
    def points(self) -> int:
        """The reference points held (the daemon's memory budget: wtwind_budget_items)."""
        tr = self.tracker
        return sum(len(r) for r in tr.references) if tr is not None else 0

    def update(self, policy, step: int, loss: float, lr, tokens, now: float) -> list[Alert]:
        """One loss of the run: the alert transition its ``behind`` finding causes, if any."""
        if now >= self.due and self.refresh is not None:
            self.due = math.inf
            self.refresh(step)          # may replace the tracker (other curves now)
        tracker = self.tracker
        if tracker is None:
            return []
        k = tracker.feed(step, loss, NAN if lr is None else lr, NAN if tokens is None else tokens)
        if k == SCHEDULE and not self.told and self.tell is not None:
            self.told = True
            self.tell(schedule_message(tracker, lr))
        if k != BEHIND and not self._behind:
            return []
        was, self._behind = self._behind, k == BEHIND
        v = tracker.verdict()
        finding = v.finding()
        if finding is None and was:     # a tracker rebuilt on other references: not behind them
            finding = Finding("behind", "warning", False, step, v.message)
        alert = policy.apply(finding, now) if finding is not None else None
        return [alert] if alert else []

    def verdict(self):
        return self.tracker.verdict() if self.tracker is not None else None

    def snapshot(self) -> dict:
        tr = self.tracker
        return {"names": self.names, "group": self.group,
                "tracker": tr.snapshot() if tr is not None else self.frozen, "told": self.told}


def schedule_message(tracker: ReferenceTracker, lr) -> str:
    """The info a trainer gets once when its lr differs from its reference's: whose, both
    lrs at this step (the reference's interpolated on its curve)."""
    v = tracker.verdict()
    ref = next((c for c in tracker.references if c.name == v.reference), None)
    theirs = NAN
    if ref is not None and ref.has_lr:
        xs = np.asarray(ref.steps, dtype=float)
        theirs = float(np.interp(v.step, xs, np.asarray(ref.lrs, dtype=float)))
    return (f"lr differs from {v.reference}'s ({lr:.3g} vs {theirs:.3g} at step {v.step:,}): "
            "the runs follow other schedules, so the loss is not compared with it (the run is "
            "monitored as usual)")


def curve_from_columns(name: str, cols: dict, max_points: int = MAX_POINTS) -> ReferenceCurve | None:
    """A curve from plot/envelope columns (step, loss, lr, tokens; None or NaN missing);
    None when it has fewer than 2 finite losses."""
    def arr(key):
        col = cols.get(key)
        if col is None:
            return np.full(len(cols["step"]), NAN)
        return np.asarray([NAN if v is None else v for v in col], dtype=float)

    steps, loss, lr, tokens = arr("step"), arr("loss"), arr("lr"), arr("tokens")
    keep = np.isfinite(steps) & np.isfinite(loss)
    if keep.sum() < 2:
        return None
    idx = np.flatnonzero(keep)
    if len(idx) > max_points:   # evenly thinned, the last point kept
        idx = idx[np.unique(np.linspace(0, len(idx) - 1, max_points).round().astype(int))]
    has_tok = bool(np.isfinite(tokens[idx]).all())
    return ReferenceCurve(name, steps[idx].astype(np.int64).tolist(), loss[idx].tolist(),
                          lr[idx].tolist(), tokens[idx].tolist() if has_tok else None)


class References:
    """Resolves the references a run names (``start``, ``resolve``) and warns of the
    missing ones. ``send(identity, frame)``: the ROUTER's send."""

    def __init__(self, table, store, send: Callable[[bytes, bytes], bool], *,
                 max_references: int = MAX_REFERENCES, max_points: int = MAX_POINTS,
                 config: ReferenceConfig = ReferenceConfig(), resolve_s: float = RESOLVE_S,
                 shared: tuple[str, ...] = (), max_total_points: int | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """``shared``: run-name globs any principal may compare with (``[runs] shared``);
        ``max_total_points``: every run's curves together (``[runs] max_reference_points``,
        inside the memory budget; None: no bound)."""
        self.table, self.store, self.send = table, store, send
        self.max_total_points = max_total_points
        self._held = 0            # points attached, an upper bound (runs that left memory not taken off)
        self.shared = tuple(shared)
        self.foreign = 0          # another principal's runs met and ignored (named or siblings)
        self.max_references, self.max_points, self.config = max_references, max_points, config
        self.resolve_s, self.clock = resolve_s, clock
        self.refreshed = 0        # trackers replaced by a look-up that found other curves
        self.missing = 0          # names that resolved to nothing (wtwind_references_missing_total)

    def collect(self):
        """A Prometheus collector (registered in daemon/wiring.py)."""
        yield CounterMetricFamily("wtwind_references_missing", "References named on run_start that "
                                  "could not be used (no such run, no history, over max_references)",
                                  value=self.missing)
        yield CounterMetricFamily("wtwind_references_foreign", "Runs of another principal a run named "
                                  "or had in its group, ignored (not shared by [runs] shared); counted "
                                  "at each look-up that met one", value=self.foreign)
        yield CounterMetricFamily("wtwind_references_replaced", "Run trackers rebuilt because a later "
                                  "look-up found other reference curves (a new sibling, a grown run)",
                                  value=self.refreshed)

    def start(self, run, ev: dict) -> None:
        """A run_start with ``reference`` or ``group`` (validated by the wire): resolve."""
        names, group = list(ev.get("reference") or ()), ev.get("group")
        if not names and group is None:
            run.refs = None
            return
        if len(names) > self.max_references:
            self.warn(run, ", ".join(names[self.max_references:]),
                      f"over the {self.max_references} references a run may name")
            names = names[: self.max_references]
        run.refs = RunReference(names, group)
        self.resolve(run)
        if group is not None:        # a new sibling: the group's running runs look soon
            soon = self.clock() + self.resolve_s
            for r in self._group(run):
                if r.status == "running":
                    r.refs.due = min(r.refs.due, soon)

    def ended(self, run) -> None:
        """A run of a group ended: its running siblings look their references up again
        now (a sweep started together compares with its first member to finish)."""
        if run.refs.group is None:
            return
        for r in self._group(run):
            if r.status == "running":
                r.refs.due = math.inf
                self.resolve(r, quiet=True, upto=(r.step or 0) + 1)

    def _group(self, run, foreign: list | None = None) -> list:
        """The run's siblings it may compare with; other principals' go to ``foreign``."""
        group, out = run.refs.group, []
        for r in self.table:
            if r is not run and r.refs is not None and r.refs.group == group:
                if self.yours(run, r.run, r.owner):
                    out.append(r)
                elif foreign is not None:
                    foreign.append(r.run)
        return out

    def yours(self, run, name: str, owner: str | None) -> bool:
        """``run`` may compare with the run ``name`` owned by ``owner``: the same principal,
        or a name the operator shares."""
        return (owner is not None and owner == run.owner) or any(fnmatchcase(name, p) for p in self.shared)

    def siblings(self, run, foreign: list | None = None) -> list[str]:
        return [r.run for r in self._group(run, foreign)] if run.refs.group is not None else []

    def resolve(self, run, quiet: bool = False, upto: int | None = None) -> None:
        """Build the run's tracker from its references: live ones now, stored ones once
        the store has read them (on the writer thread). ``quiet``: a scheduled look-up
        (no new warning); ``upto``: a tracker built now is warmed on the run's own series
        before this step."""
        refs = run.refs
        if refs.refresh is None:     # restored runs too (daemon/restores.py)
            refs.refresh = lambda step: self.resolve(run, quiet=True, upto=step)
            refs.tell = lambda message: self.tell(run, message)
        curves, stored, missing, incomplete, foreign = [], [], [], False, []
        wanted = [(n, True) for n in refs.names if n != run.run]
        wanted += [(n, False) for n in self.siblings(run, foreign) if n not in refs.names]
        self.foreign += len(foreign)
        for name, named in wanted[: self.max_references]:
            live = self.table.get(name)   # a restored run's plot series start empty: the store has it
            if live is not None and not self.yours(run, name, live.owner):
                self.foreign += 1
                missing.append((name, NOT_KNOWN))
                continue
            curve = curve_from_columns(name, live.series.train.columns(), self.max_points) if live else None
            incomplete = incomplete or curve is None or live.status == "running"   # may grow
            if curve is not None:
                curves.append(curve)
            elif named and self.store.wanted and name in self.store.runs:
                stored.append(name)
            elif named:
                missing.append((name, "has fewer than 2 losses yet" if live else NOT_KNOWN))
        look = (missing, incomplete, quiet, upto)
        if not stored:
            self._attach(run, curves, *look)
            return
        yours = lambda name, owner: self.yours(run, name, owner)  # noqa: E731 (read on the writer thread)
        self.store.writer.submit(lambda conn: _read_stored(conn, stored, yours), read=True,
                                 done=lambda res, err: self._stored(run, curves, look, res, err))

    def _stored(self, run, curves: list, look: tuple, res, err) -> None:
        if err is not None:
            log.warning("reference_read_failed", run=run.run, error=str(err)[:300])
            res = {}
        for name, (owner, cols) in (res or {}).items():
            if not self.yours(run, name, owner):
                self.foreign += 1
                look[0].append((name, NOT_KNOWN))
                continue
            curve = curve_from_columns(name, cols, self.max_points) if cols is not None else None
            if curve is None:
                look[0].append((name, "has no stored history"))
            else:
                curves.append(curve)
        if self.table.get(run.run) is run:   # the run went on meanwhile: warm on all of it
            self._attach(run, curves, look[0], look[1], look[2], None if look[3] is None else (run.step or 0) + 1)

    def _attach(self, run, curves: list, missing: list, incomplete: bool, quiet: bool,
                upto: int | None) -> None:
        refs = run.refs
        if refs is None:
            return
        curves, over = self._fit(run, curves)
        missing = missing + [(c.name, OVER_BUDGET) for c in over]
        incomplete = incomplete or bool(over)
        for name, why in missing:     # a scheduled look-up warns of a name once
            if not quiet or name not in refs.warned:
                self.warn(run, name, why)
        refs.warned = refs.warned.union(n for n, _ in missing)
        if incomplete or missing:     # look again later, less often each time
            refs.every = min(max(2 * refs.every, self.resolve_s), MAX_RESOLVE_S)
            refs.due = self.clock() + refs.every
        if not curves or (refs.tracker is not None
                          and _same_curves(curves, refs.tracker.references)):
            return
        old, refs.tracker = refs.tracker, ReferenceTracker(curves, self.config)
        if upto is not None:
            self._warm(run, refs.tracker, upto)
        self.refreshed += old is not None
        if refs.frozen is not None:
            try:
                refs.tracker.restore(refs.frozen)
            except Exception as exc:   # other references now: the tracker starts afresh
                log.info("reference_state_not_restored", run=run.run, why=str(exc)[:200])
            refs.frozen = None
        log.info("reference_attached", run=run.run, references=[c.name for c in curves],
                 points=[len(c) for c in curves], replaced=old is not None)

    def _fit(self, run, curves: list) -> tuple[list, list]:
        """The curves that fit in ``max_total_points`` with every other run's (the run's
        own tracker's given back), and those that do not, the last named first."""
        if self.max_total_points is None or not curves:
            return curves, []
        mine = run.refs.points
        want = sum(len(c) for c in curves)
        if self._held - mine + want > self.max_total_points:  # maybe stale: count them
            self._held = sum(r.refs.points for r in self.table if r.refs is not None)
        room = self.max_total_points - (self._held - mine)
        kept, over = list(curves), []
        while kept and sum(len(c) for c in kept) > room:
            over.insert(0, kept.pop())
        self._held += sum(len(c) for c in kept) - mine if kept else 0
        return kept, over

    @staticmethod
    def _warm(run, tracker: ReferenceTracker, upto: int) -> None:
        """Feed a new tracker the run's own series before step ``upto`` (its level and
        the pair's noise then stand where the old tracker's did)."""
        cols = run.series.train.columns()
        n = len(cols["step"])
        for key in ("lr", "tokens"):
            if cols.get(key) is None:
                cols[key] = [None] * n
        for s, x, lr, tok in zip(cols["step"], cols["loss"], cols["lr"], cols["tokens"]):
            if s is not None and x is not None and s < upto:
                tracker.feed(int(s), float(x), NAN if lr is None else lr, NAN if tok is None else tok)

    def tell(self, run, message: str) -> None:
        """The run's lr schedule differs from its reference's: logged once, told to the
        trainer as an ``info`` alert of kind ``schedule_differs`` (its ``on_alert``)."""
        log.info("schedule_differs", run=run.run, message=message)
        frame = wire.reply("alert", run=run.run, kind="schedule_differs", severity="info",
                           status="firing", step=run.step or 0, message=message)
        for identity in run.identities.values():
            self.send(identity, frame)

    def warn(self, run, name: str, why: str) -> None:
        """A reference that cannot be used: logged, counted, told to the trainer."""
        self.missing += 1
        msg = f"reference {name} {why}: not compared (the run is monitored as usual)"
        log.warning("reference_missing", run=run.run, reference=name, why=why)
        frame = wire.reply("alert", run=run.run, kind="reference_missing", severity="info",
                           status="firing", step=run.step or 0, message=msg, reference=name)
        for identity in run.identities.values():
            self.send(identity, frame)


def _read_stored(conn, names: list[str], yours: Callable[[str, str | None], bool]) -> dict:
    """On the writer thread: each stored run's owner and train history as columns (None:
    none); the history of a run that is not ``yours(name, owner)`` is not read at all."""
    from .series import TRAIN_FIELDS
    from .store import envelope, series_rows
    from .store.snapshot_head import decode_head

    out = {}
    for name in names:
        row = conn.execute("SELECT snapshot FROM runs WHERE run = ?", (name,)).fetchone()
        try:
            owner = decode_head(row[0]).get("owner") if row and row[0] else None
        except Exception:  # an unreadable snapshot: nobody's
            owner = None
        if not yours(name, owner):
            out[name] = (owner, None)
            continue
        blk = series_rows.read(conn, name, "train")
        out[name] = (owner, envelope.columns(blk, TRAIN_FIELDS[1:]) if len(blk) else None)
    return out
