"""The per-event path, in one place: a frame's events, each run's events of it, and for
each (emitter, secret) group of those, one body: admit -> seq -> observe -> publish -> mark.

``Ingest.frame`` decodes and validates a frame in one pass (``wire.decode_frame``) and
hands each run's events on, in the order of each run's first event. A run not in memory
takes its events one at a time (``event``): admission creates it, or the store gives it
back first (``Restores.hold``). A live run's events are split into consecutive groups of
one emitter and one secret (the secret leaves each event here), and each group goes
through ``_body``: one admission (owner, quotas), the emitter's mark, then per event its
seq verdict (``EmitterMarks.admit_seq``; what a refusal costs is ``EmitterLink.answer``),
the run's detectors (``RunState.observe``/``observe_loss``), its alerts published
(journaled, then delivered), and last the run marked for its next snapshot.

A batch of plain loss events with one emitter and one secret (``wire.Batch.columns``) is
fed to the same body by an iterator over its columns: no event dict is read.

Where the decoder of plain loss frames is compiled (``emitters/fast_decode.py``), a frame
is first read by it: a frame of plain loss events of a live run with one emitter and one
secret goes from its bytes to the same body, with the same arguments, without a dict or
``wire.decode_frame``; every other frame (the decoder declines it, or its run is not
live) takes the path above.

A frame is handled up to the caller's ``deadline`` (the receiver's slice). Past it, the
body stops between two events (at least ``CHECK_EVERY`` - 1 in) and what is left of the
frame, each (emitter, secret) group's remaining items in order, comes back as a `Rest`:
calling it goes on, up to its own deadline (daemon/frame_backlog.py parks it). Without
a deadline (tests, replays) a frame is handled whole.

Every item the body takes is ``(seq, event, step, loss, lr, grad_norm, tokens, ts)``: for a
loss the event is None and the values are its fields; for any other kind the event dict.
"""

from __future__ import annotations

import time
from itertools import chain, repeat

import structlog

from wtwin import emitters
from wtwin.emitters import fast_decode, wire
from wtwin.emitters.schema import TIMING
from wtwin.emitters.wire import REFUSED

from .incarnations import is_new
from .logsetup import RateLimited
from .run_state import NO_LR

TIMED = frozenset(TIMING)   # a loss event's fields of time and memory (the whole event is read)
INF = float("inf")
CHECK_EVERY = 64            # events between two looks at the clock (a power of 2)

log = structlog.get_logger("wtwind")


class Ingest:
    def __init__(self, *, stats, table, admission, link, restores, publish, changed, submit,
                 max_frame_bytes: int, references=None, incarnations=None) -> None:
        """``publish(alert)``: journal and deliver (``AlertPath.publish``); ``changed(run)``:
        mark for the next snapshot (``Snapshots.changed``); ``submit(event)``: a checkpoint
        to the job runner (``SpectralService.submit``)."""
        self.stats, self.table, self.admission, self.link = stats, table, admission, link
        self.restores, self.publish, self.changed, self.submit = restores, publish, changed, submit
        self.max_frame_bytes, self.references = max_frame_bytes, references  # references.py
        self.incarnations = incarnations  # incarnations.py: a name used again
        self._rejects_log = RateLimited(log)
        # ``fast(frame, no_lr)``: the frame's run, emitter, secret, base and body items, or
        # None (emitters/fast_decode.py); pure, msgpack is faster than it: not used
        self.fast = fast_decode.loss_frame if emitters.COMPILED else None
        self._deadline = INF   # of the frame being handled (perf_counter)
        self._cut: list | None = None  # its groups left past the deadline, in order
        self._taken = 0        # its events taken so far (the clock is read every CHECK_EVERY)

    def frame(self, identity: bytes, frame: bytes, user: str | None = None,
              deadline: float = INF) -> Rest | None:
        """A frame from ``identity`` (``user``: its CURVE key, if any), handled up to
        ``deadline``: what is left of it, or None."""
        self._deadline, self._cut, self._taken = deadline, [], 0
        try:
            self._frame(identity, frame, user)
        finally:
            cut, self._cut, self._deadline = self._cut, None, INF
        return Rest(self, cut) if cut else None

    def resume(self, groups: list, deadline: float) -> Rest | None:
        """Go on with a frame's ``groups`` left at an earlier deadline (`Rest`); each run
        is looked up again, as a later frame's would be."""
        self._deadline, self._cut, self._taken = deadline, [], 0
        try:
            for group in groups:
                self._body(self.table.get(group[0]), *group)
        finally:
            cut, self._cut, self._deadline = self._cut, None, INF
        return Rest(self, cut) if cut else None

    def _frame(self, identity: bytes, frame: bytes, user: str | None) -> None:
        self.stats.frames += 1
        fast = self.fast
        if fast is not None and len(frame) <= self.max_frame_bytes:
            got = fast(frame, NO_LR)
            if got is not None:  # plain loss events: of a live run, straight to the body
                name, em, secret, base, items = got
                live = self.table.get(name)
                if live is not None:
                    n = len(items)
                    self.stats.received["loss"] += n
                    self._body(live, name, em, secret, base, items, n, identity, time.time(), user)
                    return
        events, rejects, batch = wire.decode_frame(frame, self.max_frame_bytes)
        for reason in rejects:
            self.stats.rejected[reason] += 1
            self._rejects_log.warning("frame_rejected", reason, reason=reason, bytes=len(frame))
        if not events:
            return
        now, name = time.time(), events[0]["run"]
        if batch is None:  # one event: a plain loss of a live run goes straight to the body
            ev = events[0]
            live = self.table.get(name)
            if live is not None and ev["type"] == "loss":
                self.stats.received["loss"] += 1
                secret = ev.pop("auth", None)  # the secret leaves the event here
                self._body(live, name, ev.get("emitter"), secret, None, (_item(ev),), 1, identity, now, user)
                return
        if batch is None or (batch.columns["run"].count(name) == len(events) if batch.columns is not None
                             else all(ev["run"] == name for ev in events)):
            self._run(identity, name, events, batch, now, user)  # one run: nearly every frame
            return
        groups: dict[str, list[dict]] = {}  # several: each run's events, in their order
        for ev in events:
            groups.setdefault(ev["run"], []).append(ev)
        for name, evs in groups.items():
            self._run(identity, name, evs, batch, now, user)

    def event(self, identity: bytes, ev: dict, now: float, user: str | None = None) -> None:
        """One event of a run that was not in memory (carrying its batch's emitter, auth
        and base: ``wire.inherit``); the same body as every other."""
        secret = ev.pop("auth", None)  # the secret leaves the event here
        if ev["type"] == "run_start" and not self.admission.config_fits(ev, identity):
            return  # refused before the run exists: a refused start creates nothing
        item = _item(ev)
        self._body(None, ev["run"], ev.get("emitter"), secret, ev.get("base"), (item,), 1,
                   identity, now, user)

    def _run(self, identity: bytes, name: str, events: list[dict], batch, now: float,
             user: str | None) -> None:
        """One run's events of a frame."""
        received, live = self.stats.received, self.table.get(name)
        if live is None:  # a new run, or one in the store: one event at a time
            if batch is not None:
                wire.inherit(events, batch)
            else:  # ``base`` is a batch's (docs/PROTOCOL.md)
                events[0].pop("base", None)
            for ev in events:
                if ev["type"] == REFUSED:
                    continue  # a refused event's place: no run to keep it in
                received[ev["type"]] += 1
                item = (identity, ev, now, user)
                # a run in the store but not in memory: its events wait for its row (restores.py)
                if not self.restores.hold(name, item, self.event):
                    self.event(*item)
            return
        emitter, auth, base = (batch.emitter, batch.auth, batch.base) if batch else (None, None, None)
        if batch is not None and batch.columns is not None:
            if self._columns(identity, name, live, batch, len(events), now, user):
                return
        admission, group, key = self.admission, None, None
        for ev in events:
            kind = ev["type"]
            if kind != REFUSED:   # counted where it was refused (``frame_rejected``)
                received[kind] += 1
            secret = ev.pop("auth", auth)  # the secret leaves the event here
            em = ev.get("emitter", emitter)
            if kind == "run_start" and not admission.config_fits(ev, identity):
                continue  # refused before the run exists: a refused start creates nothing
            if group is None or key != (em, secret):
                if group:
                    self._body(live, name, key[0], key[1], base, group, len(group), identity, now, user)
                group, key = [], (em, secret)
            group.append(_item(ev))
        if group:
            self._body(live, name, key[0], key[1], base, group, len(group), identity, now, user)

    def _columns(self, identity: bytes, name: str, live, batch, n: int, now: float,
                 user: str | None) -> bool:
        """A batch of plain loss events of one live run, from its columns, when they have
        one emitter and one secret; False (nothing done) otherwise."""
        columns = batch.columns
        get = columns.get
        emitters, secrets = get("emitter"), get("auth")
        em = emitters[0] if emitters is not None else batch.emitter
        secret = secrets[0] if secrets is not None else batch.auth
        if ((emitters is not None and emitters.count(em) != n)
                or (secrets is not None and secrets.count(secret) != n)
                or not TIMED.isdisjoint(columns)):     # time and memory: event by event
            return False
        self.stats.received["loss"] += n
        none = repeat(None, n)
        items = zip(columns["seq"], none, columns["step"], columns["loss"], get("lr") or repeat(NO_LR, n),
                    get("grad_norm") or repeat(None, n), get("tokens") or repeat(None, n),
                    get("ts") or repeat(None, n))
        self._body(live, name, em, secret, batch.base, items, n, identity, now, user)
        return True

    def _body(self, live, name: str, em: str | None, secret: str | None, base: int | None, items,
              n: int, identity: bytes, now: float, user: str | None) -> None:
        """``n`` events of run ``name`` (``live``: the run, or None to create it) from one
        emitter and one secret: admit, then per event seq, observe, publish, mark; up to
        the frame's deadline, the rest cut for later (after a cut, the frame's later
        groups wait whole behind it)."""
        cut = self._cut
        if cut:
            cut.append((name, em, secret, base, items, n, identity, now, user))
            return
        admission = self.admission
        run = admission.admit(name, em, identity, admission.principal_of(secret, user), now, live, n)
        if run is None:  # refused: not the run's owner, or over a quota (replied, counted)
            return
        marks, answer, publish, changed = run.marks, self.link.answer, self.publish, self.changed
        if em is not None:
            marks.sent(em, identity, now)
        losses = 0  # loss events observed since the run was last marked
        taken, done, deadline, items = 0, self._taken, self._deadline, iter(items)
        for item in items:
            taken += 1
            if not (done + taken) % CHECK_EVERY and time.perf_counter() > deadline:
                cut.append((name, em, secret, base, chain((item,), items), n - taken + 1, identity, now, user))
                break
            seq, ev, step, loss, lr, grad_norm, tokens, ts = item
            if em is not None:
                verdict = marks.admit_seq(em, seq, base)
                if verdict and not answer(run, em, verdict):
                    continue  # already processed, or a gap to re-send first
            if ev is not None and ev["type"] == REFUSED:
                continue  # its place in the sequence taken: the emitter's next is no gap
            if run.frozen is not None:  # a run restored at startup: its detectors, at its first event
                self.restores.thaw(run)
            if ev is not None and ev["type"] == "run_start" and self.incarnations is not None \
                    and is_new(run, ev):   # an ended run's name used again: a new run
                run = self.incarnations.begin(run, now)
                marks = run.marks
            try:
                alerts = run.observe_loss(step, loss, lr, grad_norm, tokens, now, ts) if ev is None \
                    else run.observe(ev, now)
            except Exception:  # a detector bug must not take the daemon down
                self.stats.loop_errors += 1
                log.exception("observe_failed", run=name, type="loss" if ev is None else ev["type"])
                alerts = ()
            for alert in alerts:
                publish(alert)
            if ev is None:
                losses += 1
                continue
            changed(run, losses + 1)  # after the alerts: a snapshot never holds one unjournaled
            losses = 0
            self._after(run, ev)
        self._taken = done + taken   # (a new run's events come one body each)
        if losses:
            changed(run, losses)  # a group's losses: marked once, after their alerts

    def _after(self, run, ev: dict) -> None:
        kind = ev["type"]
        if kind == "run_start":
            log.info("run_started", run=run.run, preset=run.preset, preset_from=run.preset_from,
                     kind=run.kind, _client=run.creator)  # rate-limited per client (logsetup.py)
            if self.references is not None:
                self.references.start(run, ev)
        elif kind == "run_end" and run.refs is not None and self.references is not None:
            self.references.ended(run)
        elif kind == "checkpoint":
            self.submit(ev)


class Rest:
    """What is left of a frame past its deadline: call it to go on (`Ingest.resume`)."""

    __slots__ = ("ingest", "groups", "events")

    def __init__(self, ingest: Ingest, groups: list) -> None:
        self.ingest, self.groups = ingest, groups
        self.events = sum(group[5] for group in groups)   # what it holds (frame_backlog.py's bound)

    def __call__(self, deadline: float = INF) -> Rest | None:
        return self.ingest.resume(self.groups, deadline)


def _item(ev: dict) -> tuple:
    """The body's item for a validated event: a loss by its fields (one with fields of time
    and memory, `TIMED`, whole), any other kind whole."""
    if ev["type"] == "loss" and TIMED.isdisjoint(ev):
        return (ev.get("seq"), None, ev["step"], ev["loss"], ev.get("lr", NO_LR), ev.get("grad_norm"),
                ev.get("tokens"), ev.get("ts"))
    return (ev.get("seq"), ev, None, None, None, None, None, None)
