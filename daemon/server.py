"""wtwind's lifecycle in one place: startup -> main loop with a tick -> shutdown.

Startup binds the ROUTER socket and the HTTP port, then says ready. Frames are handled
as they arrive (``handle_frame``: ``Ingest.frame``, daemon/ingest.py), on the one
asyncio loop that owns all state. The tick
checks for stalled runs and expires old ones. A first SIGTERM/SIGINT only sets a flag:
the loop drains what is already received, closes sockets in a fixed order and exits 0
within ``shutdown_timeout_s``. A second signal exits at once with status 1.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time

import structlog

from wtwin import daemon, detect, emitters
from wtwin.sinks import api as sinks_api

from .build import words as build_words
from .config import DaemonConfig
from .http import build_app, start_site
from .memory_sum import over_budget
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
        self.handle_frame = parts.ingest.frame  # the per-event path (daemon/ingest.py)
        self.publish = parts.alerts.publish
        self.alert_listeners = parts.alerts.listeners  # tests add theirs
        self.ready = False
        self.stopping = False
        self.http_port: int | None = None
        self._stop = asyncio.Event()
        self._signals = 0
        self.notifier = Notifier.from_env()  # systemd Type=notify; a no-op elsewhere

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
        # which build of each compiled package runs: compiled, or the pure fallback, why, and
        # the command that fixes it: the detectors, the per-event path, the frame decoder
        for event, package in (("detector_build", detect), ("ingest_build", daemon),
                               ("decoder_build", emitters)):
            log.info(event, compiled=package.COMPILED, build=build_words(package))
        over = over_budget(self.config)   # `--check` refuses it; a daemon started anyway says so
        if over:
            log.warning("limits_over_budget", problem=over)
        # what the imports built lives as long as the process: out of every full collection
        # (a full collection walks what is left: the runs; gc_clock.py)
        if not gc.get_freeze_count():   # once a process (tests start several servers)
            gc.collect()
            gc.freeze()
        self.store.open(loop)  # ConfigError naming the file: locked, corrupt, newer, unwritable
        restored = await self.restores.load(time.time(), idle_ttl_s=self.config.runs.idle_ttl_s,
                                            ended_ttl_s=self.config.runs.ended_ttl_s)
        log.info("state_loaded", runs=restored, path=self.store.path if self.store.durable else None)
        if self.curve is not None:  # before bind: every connection must handshake
            self.curve.start(self.receiver.sock, self.receiver.ctx)
        self.receiver.bind()
        self.app = build_app(self, self.parts.registry)
        sinks_api.add_routes(self.app, self.delivery)  # /api/alerts/dead, /api/alerts/redeliver
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
        self.receiver.report_drops(time.monotonic())
        stall = self.config.detection.stall_after_s
        for run in list(self.table):
            for alert in run.check_stall(now, stall):
                self.publish(alert)
        runs = self.config.runs
        expired = self.table.expire(now, idle_ttl_s=runs.idle_ttl_s, ended_ttl_s=runs.ended_ttl_s,
                                    ended_series_s=runs.ended_series_s)
        for gone in expired:
            self.snapshots.evict(gone)  # leaves memory, stays in the store
            self.link.forget(gone)
            self.admission.forget(gone)
            log.info("run_expired", run=gone.run, status=gone.status, _client=gone.creator)
        if expired:
            self.store.prune_soon()  # prunable now: the store keeps up with churn

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
