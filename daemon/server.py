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
from typing import Callable

import structlog

from wtwin.emitters import wire
from wtwin.sinks import api as sinks_api
from wtwin.detect.alert import Alert
from wtwin.sinks.delivery import Delivery
from wtwin.sinks.metrics import DeliveryCollector
from wtwin.sinks.outbox import MemoryOutbox

from .admission import Admission
from .config import DaemonConfig, build_sinks
from .http import build_app, start_site
from .jobs.service import SpectralService
from .logsetup import RateLimited
from .metrics import DaemonCollector
from .receiver import Receiver
from .run_state import RunTable
from .store.state import StateStore, collect as store_collect
from .sdnotify import Notifier
from .stats import Stats
from .version import __version__

log = structlog.get_logger("wtwind")


class Server:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.stats = Stats()
        self.table = RunTable(preset=config.detection.preset, cooldown_s=config.detection.cooldown_s,
                              max_runs=config.runs.max_runs)
        self.spectral = SpectralService(config.jobs, self.table, publish=self.publish,
                                        send=lambda ident, frame: self.receiver.send(ident, frame),
                                        max_series_runs=config.runs.max_series_runs,
                                        changed=lambda run: self.state.touch(run))
        self.collector = DaemonCollector(self.table, self.stats,
                                         max_series_runs=config.runs.max_series_runs,
                                         ended_series_s=config.runs.ended_series_s,
                                         providers=[self.spectral.collect])
        self.receiver = Receiver(config.listen, self.handle_frame)
        self.collector.providers.append(self.receiver.collect)
        # durable state (store/): dedup by seq, snapshots, acks, alert journal + outbox
        self.state = StateStore(config.state, self.table, self.stats, self.receiver.send,
                                extras={"spectral": (self.spectral.snapshot_run, self.spectral.restore_run)})
        self.collector.providers.append(lambda: store_collect(self.state))
        self.curve = None
        if config.curve.enabled:  # zmq.auth only when it is used; a ConfigError early
            from .zmq_auth import CurveGuard

            self.curve = CurveGuard(config.curve)
            self.collector.providers.append(self.curve.collect)
            self.receiver.user_ids = True  # the client key is the runs' principal
        self.admission = Admission(config.runs, self.table, self.stats, self.receiver.send,
                                   curve=self.curve is not None)
        self.alert_listeners: list[Callable[[Alert], None]] = []
        self.outbox = self.state.outbox or MemoryOutbox()  # SQLite unless [state] is off
        self.delivery = Delivery(sinks=build_sinks(config), outbox=self.outbox, routes=config.routes,
                                 policy=config.delivery.retry, intake_size=config.delivery.intake_size)
        self.collector.providers.append(DeliveryCollector(self.delivery).collect)
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
        self.stats.frames += 1
        events, rejects = wire.decode(frame, self._max_frame)
        for reason in rejects:
            self.stats.rejected[reason] += 1
            self._rejects_log.warning("frame_rejected", reason, reason=reason, bytes=len(frame))
        now = time.time()
        for ev in events:
            self.handle_event(identity, ev, now, user)

    def handle_event(self, identity: bytes, ev: dict, now: float, user: str | None = None) -> None:
        self.stats.received[ev["type"]] += 1
        principal = self.admission.principal(ev, user)
        run = self.admission.run_for(ev, identity, principal, now)
        if run is None:  # refused: not the run's owner, or over a quota (replied, counted)
            return
        emitter = ev.get("emitter")
        if emitter is not None:
            run.emitter_seen[emitter] = now
            if run.identities.get(emitter) != identity:
                run.identities[emitter] = identity
        if not self.state.admit(run, ev):  # already processed, or a gap to re-send first
            return
        try:
            transitions = run.observe(ev, now)
        except Exception:  # a detector bug must not take the daemon down
            self.stats.loop_errors += 1
            log.exception("observe_failed", run=ev["run"], type=ev["type"])
            return
        for alert in transitions:
            self.publish(alert)
        if ev["type"] == "run_start":
            log.info("run_started", run=run.run, preset=run.preset, preset_from=run.preset_from,
                     kind=run.kind)
        if ev["type"] == "checkpoint":
            self.spectral.submit(ev)

    def publish(self, alert: Alert) -> None:
        if alert.status == "firing":
            self.stats.alerts[(alert.kind, alert.severity)] += 1
        log.debug("alert_transition", run=alert.run, kind=alert.kind, severity=alert.severity,
                  status=alert.status, step=alert.step)  # the `log` sink reports it to people
        run = self.table.get(alert.run)
        if run is not None:
            frame = wire.reply("alert", **alert.to_dict())
            for identity in run.identities.values():
                self.receiver.send(identity, frame)
        try:  # routed now; journaled with its run's snapshot and its outbox rows, one FULL commit
            self.state.on_alert(alert, self.delivery.stage(alert))
        except Exception:
            self.stats.loop_errors += 1
            log.exception("alert_commit_failed", run=alert.run, kind=alert.kind)
        for listener in self.alert_listeners:
            try:
                listener(alert)
            except Exception:
                self.stats.loop_errors += 1
                log.exception("alert_listener_failed", run=alert.run, kind=alert.kind)

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
        self.state.open(loop)  # ConfigError naming the file: locked, corrupt, newer, unwritable
        restored = self.state.load(time.time(), idle_ttl_s=self.config.runs.idle_ttl_s,
                                   ended_ttl_s=self.config.runs.ended_ttl_s)
        log.info("state_loaded", runs=restored, path=self.state.path if self.state.durable else None)
        if self.curve is not None:  # before bind: every connection must handshake
            self.curve.start(self.receiver.sock, self.receiver.ctx)
        self.receiver.bind()
        self.app = build_app(self)
        sinks_api.add_routes(self.app, self.delivery)  # /api/alerts/dead, /api/alerts/replay
        self._http_runner, self.http_port = await start_site(
            self.app, self.config.http.host, self.config.http.port)
        self.receiver.start(loop)
        self.state.start(loop)
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
            self.state.evict(gone)  # leaves memory, stays in the store
            self.admission.forget(gone)
            log.info("run_expired", run=gone.run, status=gone.status)

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
        await self.spectral.aclose()  # cancels queued and running jobs, stops the workers
        await self.delivery.drain(self.config.delivery.drain_timeout_s)  # send what is due
        await self.delivery.aclose()
        await self.state.close()  # final snapshots committed, writer stopped
        if getattr(self, "_http_runner", None) is not None:
            await self._http_runner.cleanup()
