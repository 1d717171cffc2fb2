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
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import structlog
from prometheus_client.core import CounterMetricFamily

from wtwin.detect.alert import Alert
from wtwin.detect.reference import ReferenceConfig, ReferenceCurve, ReferenceTracker
from wtwin.emitters import wire

log = structlog.get_logger("wtwind.references")
NAN = math.nan
BEHIND = 1                  # detect.reference.STATES.index("behind")
MAX_REFERENCES = 4          # references a run may name (more: the first ones, and a warning)
MAX_POINTS = 2048           # points kept of a reference's curve


class RunReference:
    """What one run holds: the names it asked for, its group, and the tracker once the
    references are resolved (None until then, or when none resolved)."""

    __slots__ = ("names", "group", "tracker", "frozen", "_behind")

    def __init__(self, names: list[str], group: str | None, frozen: dict | None = None) -> None:
        self.names, self.group, self.frozen = names, group, frozen
        self.tracker: ReferenceTracker | None = None
        self._behind = False

    def update(self, policy, step: int, loss: float, lr, tokens, now: float) -> list[Alert]:
        """One loss of the run: the alert transition its ``behind`` finding causes, if any."""
        tracker = self.tracker
        if tracker is None:
            return []
        k = tracker.feed(step, loss, NAN if lr is None else lr, NAN if tokens is None else tokens)
        if k != BEHIND and not self._behind:
            return []
        self._behind = k == BEHIND
        finding = tracker.verdict().finding()
        alert = policy.apply(finding, now) if finding is not None else None
        return [alert] if alert else []

    def verdict(self):
        return self.tracker.verdict() if self.tracker is not None else None

    def snapshot(self) -> dict:
        tr = self.tracker
        return {"names": self.names, "group": self.group,
                "tracker": tr.snapshot() if tr is not None else self.frozen}


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
                 config: ReferenceConfig = ReferenceConfig()) -> None:
        self.table, self.store, self.send = table, store, send
        self.max_references, self.max_points, self.config = max_references, max_points, config
        self.missing = 0          # names that resolved to nothing (wtwind_references_missing_total)

    def collect(self):
        """A Prometheus collector (registered in daemon/wiring.py)."""
        yield CounterMetricFamily("wtwind_references_missing", "References named on run_start that "
                                  "could not be used (no such run, no history, over max_references)",
                                  value=self.missing)

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

    def ended(self, run) -> None:
        """A run of a group ended: its running siblings that compare with nothing yet (a
        sweep started together) take it, and the group's other finished runs, now."""
        group = run.refs.group
        if group is None:
            return
        for r in list(self.table):
            if (r is not run and r.status == "running" and r.refs is not None and r.refs.group == group
                    and r.refs.tracker is None):
                self.resolve(r)

    def siblings(self, run) -> list[str]:
        group = run.refs.group
        if group is None:
            return []
        return [r.run for r in self.table if r is not run and r.refs is not None and r.refs.group == group]

    def resolve(self, run) -> None:
        """Build the run's tracker from its references: live ones now, stored ones once
        the store has read them (on the writer thread)."""
        refs = run.refs
        curves, stored, missing = [], [], []
        wanted = [(n, True) for n in refs.names if n != run.run]
        wanted += [(n, False) for n in self.siblings(run) if n not in refs.names]
        for name, named in wanted[: self.max_references]:
            live = self.table.get(name)   # a restored run's plot series start empty: the store has it
            curve = curve_from_columns(name, live.series.train.columns(), self.max_points) if live else None
            if curve is not None:
                curves.append(curve)
            elif named and self.store.wanted and name in self.store.runs:
                stored.append(name)
            elif named:
                missing.append((name, "has fewer than 2 losses yet" if live else "is not a run this daemon knows"))
        if not stored:
            self._attach(run, curves, missing)
            return
        self.store.writer.submit(lambda conn: _read_stored(conn, stored), read=True,
                                 done=lambda res, err: self._stored(run, curves, missing, res, err))

    def _stored(self, run, curves: list, missing: list, res, err) -> None:
        if err is not None:
            log.warning("reference_read_failed", run=run.run, error=str(err)[:300])
            res = {}
        for name, cols in (res or {}).items():
            curve = curve_from_columns(name, cols, self.max_points) if cols is not None else None
            if curve is None:
                missing.append((name, "has no stored history"))
            else:
                curves.append(curve)
        if self.table.get(run.run) is run:
            self._attach(run, curves, missing)

    def _attach(self, run, curves: list, missing: list) -> None:
        for name, why in missing:
            self.warn(run, name, why)
        refs = run.refs
        if refs is None or not curves:
            return
        refs.tracker = ReferenceTracker(curves, self.config)
        if refs.frozen is not None:
            try:
                refs.tracker.restore(refs.frozen)
            except Exception as exc:   # other references now: the tracker starts afresh
                log.info("reference_state_not_restored", run=run.run, why=str(exc)[:200])
            refs.frozen = None
        log.info("reference_attached", run=run.run, references=[c.name for c in curves],
                 points=[len(c) for c in curves])

    def warn(self, run, name: str, why: str) -> None:
        """A reference that cannot be used: logged, counted, told to the trainer."""
        self.missing += 1
        msg = f"reference {name} {why}: not compared (the run is monitored as usual)"
        log.warning("reference_missing", run=run.run, reference=name, why=why)
        frame = wire.reply("alert", run=run.run, kind="reference_missing", severity="info",
                           status="firing", step=run.step or 0, message=msg, reference=name)
        for identity in run.identities.values():
            self.send(identity, frame)


def _read_stored(conn, names: list[str]) -> dict:
    """On the writer thread: each stored run's train history as columns (None: none)."""
    from .series import TRAIN_FIELDS
    from .store import envelope, series_rows

    out = {}
    for name in names:
        blk = series_rows.read(conn, name, "train")
        out[name] = envelope.columns(blk, TRAIN_FIELDS[1:]) if len(blk) else None
    return out
