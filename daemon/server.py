"""wtwind's lifecycle in one place: startup -> main loop with a tick -> shutdown.

Startup binds the ROUTER socket and the HTTP port, then says ready. Frames are handled
as they arrive (``handle_frame``), on the one asyncio loop that owns all state. The tick
checks for stalled runs and expires old ones. A first SIGTERM/SIGINT only sets a flag:
the loop drains what is already received, closes sockets in a fixed order and exits 0
within ``shutdown_timeout_s``. A second signal exits at once with status 1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import structlog

from wtwin import detect
from wtwin.emitters import wire
from wtwin.sinks import api as sinks_api

from .config import DaemonConfig
from .http import build_app, start_site
from .logsetup import RateLimited
from .run_state import NO_LR
from .sdnotify import Notifier
from .version import __version__
from .wiring import Parts, build

log = structlog.get_logger("wtwind")


class Server:
    def __init__(self, config: DaemonConfig, parts: Parts | None = None) -> None:
        """The lifecycle around the object graph ``build(config)`` makes (daemon/wiring.py)."""
        parts = parts or build(config)
        self.config = config
        self.parts = parts
        self.stats, self.table, self.receiver = parts.stats, parts.table, parts.receiver
        self.curve, self.store, self.link = parts.curve, parts.store, parts.link
        self.snapshots, self.restores, self.delivery = parts.snapshots, parts.restores, parts.delivery
        self.alerts, self.spectral, self.admission = parts.alerts, parts.spectral, parts.admission
        self.outbox = parts.delivery.outbox
        self.publish = parts.alerts.publish
        self.alert_listeners = parts.alerts.listeners  # tests add theirs
        self.ready = False
        self.stopping = False
        self.http_port: int | None = None
        self._stop = asyncio.Event()
        self._signals = 0
        self._max_frame = config.listen.max_frame_bytes
        self._rejects_log = RateLimited(log)
        self.notifier = Notifier.from_env()  # systemd Type=notify; a no-op elsewhere

    # ---- hot path ---------------------------------------------------------------------
    def handle_frame(self, identity: bytes, frame: bytes, user: str | None = None) -> None:
        """A frame's events, as a batch: decoded and validated in one pass, then each run's
        events together (``_handle_run``; in the order of each run's first event)."""
        self.stats.frames += 1
        events, rejects, batch = wire.decode_frame(frame, self._max_frame)
        for reason in rejects:
            self.stats.rejected[reason] += 1
            self._rejects_log.warning("frame_rejected", reason, reason=reason, bytes=len(frame))
        if not events:
            return
        now, name = time.time(), events[0]["run"]
        if batch is None:  # a single event
            self._handle_run(identity, name, events, None, now, user)
            return
        columns = batch.columns
        if columns is not None and columns["run"].count(name) == len(events):
            if self._handle_losses(identity, name, events, batch, now, user):
                return
        elif all(ev["run"] == name for ev in events):  # one run: nearly every frame
            self._handle_run(identity, name, events, batch, now, user)
            return
        groups: dict[str, list[dict]] = {}  # several: each run's events, in their order
        for ev in events:
            groups.setdefault(ev["run"], []).append(ev)
        for name, evs in groups.items():
            self._handle_run(identity, name, evs, batch, now, user)

    def _handle_losses(self, identity: bytes, name: str, events: list[dict], batch: wire.Batch,
                       now: float, user: str | None) -> bool:
        """A batch of plain loss events of one live run, one emitter and one secret, whose
        seqs follow the run's mark one by one (a trainer's batch), from its columns: one
        admission, the seqs checked at once, no per-event dict read. False (nothing done)
        for any other batch: ``_handle_run`` takes it."""
        columns, n = batch.columns, len(events)
        emitters, secrets, seqs = columns.get("emitter"), columns.get("auth"), columns["seq"]
        em = emitters[0] if emitters is not None else batch.emitter
        secret = secrets[0] if secrets is not None else batch.auth
        run = self.table.get(name)
        if (run is None or (emitters is not None and emitters.count(em) != n)
                or (secrets is not None and secrets.count(secret) != n)):
            return False
        if em is not None:
            first = run.hwm.get(em, 0) + 1
            if seqs[0] != first or seqs[-1] != first + n - 1 or seqs != tuple(range(first, first + n)):
                return False
        run = self.admission.admit(name, em, identity, self.admission.principal_of(secret, user), now, run)
        if run is None:  # refused (replied, counted): the others go the general way, counted
            self.stats.received["loss"] += 1
            self._handle_run(identity, name, events[1:], batch, now, user)
            return True
        self.stats.received["loss"] += n
        if em is not None:
            self.link.seen(run, em, identity, now)
        if run.frozen is not None:  # a run restored at startup: its detectors, at its first event
            self.restores.thaw(run)
        hwm, observe_loss, get = run.hwm, self._observe_loss, columns.get
        none = (None,) * n
        for seq, step, loss, lr, grad_norm, tokens in zip(
                seqs, columns["step"], columns["loss"], get("lr") or (NO_LR,) * n,
                get("grad_norm", none), get("tokens", none)):
            if em is not None:
                hwm[em] = seq
            run.events += 1
            observe_loss(run, step, loss, lr, grad_norm, tokens, now)
        return True

    def _handle_run(self, identity: bytes, name: str, events: list[dict], batch: wire.Batch | None,
                    now: float, user: str | None) -> None:
        """One run's events of a frame: ``handle_event``'s steps, with one run-table lookup
        and one admission for each (emitter, secret) in the frame, not one per event, and
        the seq admission of the next event in line (``seq == hwm + 1``) inlined."""
        received, live = self.stats.received, self.table.get(name)
        if live is None:  # a new run, or one in the store: the general path
            if batch is not None:
                wire.inherit(events, batch)
            else:  # ``base`` is a batch's (docs/PROTOCOL.md)
                events[0].pop("base", None)
            for ev in events:
                received[ev["type"]] += 1
                # a run in the store but not in memory: its events wait for its row (restores.py)
                if not self.restores.hold(name, (identity, ev, now, user), self.handle_event):
                    self.handle_event(identity, ev, now, user)
            return
        emitter, auth, base = (batch.emitter, batch.auth, batch.base) if batch else (None, None, None)
        admission, link, observe, observe_loss = self.admission, self.link, self._observe, self._observe_loss
        run, losses, em_was, auth_was = None, 0, None, None
        for ev in events:
            kind = ev["type"]
            if kind == "loss":
                losses += 1
            else:
                received[kind] += 1
            secret = ev.pop("auth", auth)  # the secret leaves the event here
            em = ev.get("emitter", emitter)
            if kind == "run_start" and not admission.config_fits(ev, identity):
                continue  # refused before the run exists: a refused start creates nothing
            if run is None or em != em_was or secret != auth_was:
                em_was, auth_was = em, secret
                run = admission.admit(name, em, identity, admission.principal_of(secret, user), now, live)
                if run is None:  # refused: not the run's owner, or over a quota (replied, counted)
                    continue
                hwm = run.hwm
                if em is not None:
                    link.seen(run, em, identity, now)
            if em is not None:
                seq = ev["seq"]
                if seq == hwm.get(em, 0) + 1:
                    hwm[em] = seq
                elif not link.admit_seq(run, em, seq, base):  # already processed, or a gap
                    continue
            run.events += 1
            if kind != "loss" or run.frozen is not None:
                observe(run, ev, kind, now)
                continue
            observe_loss(run, ev["step"], ev["loss"], ev.get("lr", NO_LR), ev.get("grad_norm"),
                         ev.get("tokens"), now)
        if losses:
            received["loss"] += losses

    def _observe_loss(self, run, step: int, loss: float, lr, grad_norm, tokens, now: float) -> None:
        """``_observe`` for a loss event of a thawed run, from its fields (no event dict):
        the detectors, the alerts (journaled, then delivered), then the snapshot mark."""
        try:
            transitions = run.observe_loss(step, loss, lr, grad_norm, tokens, now)
        except Exception:  # a detector bug must not take the daemon down
            self.stats.loop_errors += 1
            log.exception("observe_failed", run=run.run, type="loss")
            transitions = ()
        for alert in transitions:
            self.publish(alert)
        self.snapshots.changed(run)  # after the alerts: a snapshot never holds one unjournaled

    def _observe(self, run, ev: dict, kind: str, now: float) -> None:
        """An admitted event: the run's state and detectors, its alerts (journaled, then
        delivered), and last the run is marked for its next snapshot."""
        if run.frozen is not None:  # a run restored at startup: its detectors, at its first event
            self.restores.thaw(run)
        try:
            transitions = run.observe(ev, now)
        except Exception:  # a detector bug must not take the daemon down
            self.stats.loop_errors += 1
            log.exception("observe_failed", run=ev["run"], type=kind)
            transitions = ()
        for alert in transitions:
            self.publish(alert)
        self.snapshots.changed(run)  # after the alerts: a snapshot never holds one unjournaled
        if kind == "loss":
            return
        if kind == "run_start":
            log.info("run_started", run=run.run, preset=run.preset, preset_from=run.preset_from,
                     kind=run.kind, _client=run.creator)  # rate-limited per client (logsetup.py)
        elif kind == "checkpoint":
            self.spectral.submit(ev)

    def handle_event(self, identity: bytes, ev: dict, now: float, user: str | None = None) -> None:
        """One event, in this order: whose run (admission), the emitter link (seq: a
        duplicate or a gap stops here), then ``_observe``. ``_handle_run`` takes the same
        steps for a frame's events of a live run."""
        principal = self.admission.principal(ev, user)
        run = self.admission.run_for(ev, identity, principal, now)
        if run is None:  # refused: not the run's owner, or over a quota (replied, counted)
            return
        if not self.link.admit(run, ev, identity, now):  # already processed, or a gap to re-send first
            return
        self._observe(run, ev, ev["type"], now)

    # ---- lifecycle --------------------------------------------------------------------
    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        await self.startup(loop)
        try:
            await self.main_loop()
        finally:
            await self.shutdown()
        return 0

    async def startup(self, loop: asyncio.AbstractEventLoop) -> None:
        # which build of the detector core runs: compiled, or the pure-Python fallback and why
        log.info("detector_build", compiled=detect.COMPILED, build=detect.BUILD)
        self.store.open(loop)  # ConfigError naming the file: locked, corrupt, newer, unwritable
        restored = await self.restores.load(time.time(), idle_ttl_s=self.config.runs.idle_ttl_s,
                                            ended_ttl_s=self.config.runs.ended_ttl_s)
        log.info("state_loaded", runs=restored, path=self.store.path if self.store.durable else None)
        if self.curve is not None:  # before bind: every connection must handshake
            self.curve.start(self.receiver.sock, self.receiver.ctx)
        self.receiver.bind()
        self.app = build_app(self, self.parts.registry)
        sinks_api.add_routes(self.app, self.delivery)  # /api/alerts/dead, /api/alerts/replay
        self._http_runner, self.http_port = await start_site(
            self.app, self.config.http.host, self.config.http.port,
            keepalive_timeout_s=self.config.http.keepalive_timeout_s)
        self.receiver.start(loop, self.handle_frame)
        self.snapshots.start(loop)
        await self.delivery.start()
        self.ready = True
        self.notifier.ready(f"watching; http port {self.http_port}")
        self.notifier.tick(time.time())
        log.info("ready", version=__version__, endpoints=list(self.config.listen.endpoints),
                 http=f"http://{self.config.http.host}:{self.http_port}", pid=os.getpid())

    async def main_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self.config.tick_s)
            except asyncio.TimeoutError:
                pass
            self.tick(time.time())

    def tick(self, now: float) -> None:
        self.notifier.tick(now)
        self.receiver.drain()  # belt and braces against a missed edge on the FD
        self.receiver.drain_monitor()
        stall = self.config.detection.stall_after_s
        for run in list(self.table):
            for alert in run.check_stall(now, stall):
                self.publish(alert)
        runs = self.config.runs
        for gone in self.table.expire(now, idle_ttl_s=runs.idle_ttl_s, ended_ttl_s=runs.ended_ttl_s,
                                      ended_series_s=runs.ended_series_s):
            self.snapshots.evict(gone)  # leaves memory, stays in the store
            self.link.forget(gone)
            self.admission.forget(gone)
            log.info("run_expired", run=gone.run, status=gone.status, _client=gone.creator)

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("forced_exit", signal=signal.Signals(sig).name)
            os._exit(1)
        log.info("stopping", signal=signal.Signals(sig).name)
        self.stopping = True
        self._stop.set()

    def request_stop(self) -> None:
        self.stopping = True
        self._stop.set()

    async def shutdown(self) -> None:
        self.stopping = True
        self.notifier.stopping()
        try:
            await asyncio.wait_for(self._shutdown_steps(), self.config.shutdown_timeout_s)
        except asyncio.TimeoutError:
            log.error("shutdown_timeout", timeout_s=self.config.shutdown_timeout_s)
        self.receiver.close()
        if self.curve is not None:
            self.curve.stop()
        log.info("stopped", frames=self.stats.frames, events=sum(self.stats.received.values()),
                 runs=len(self.table))

    async def _shutdown_steps(self) -> None:
        while self.receiver.drain():   # what already arrived is still handled
            await asyncio.sleep(0)
        await self.restores.settle()  # runs being read back: their held events handled too
        await self.spectral.aclose()  # cancels queued and running jobs, stops the workers
        await self.delivery.drain(self.config.delivery.drain_timeout_s)  # send what is due
        await self.delivery.aclose()
        self.snapshots.close()  # final snapshots of every dirty run, queued
        await self.store.close()  # committed, writer stopped
        if getattr(self, "_http_runner", None) is not None:
            await self._http_runner.cleanup()
