"""wtwind's configuration: one TOML file -> frozen dataclasses; env overrides.

Every section is a keyword-only frozen dataclass that checks itself in
``__post_init__`` and is owned by the component it configures; ``load.build`` is
the one walker from TOML to them. This module reads the process environment for the
config: ``load()`` (``WTWIND_<SECTION>__<KEY>=value`` overrides a key,
``WTWIND_HTTP__PORT=9500``), and ``resolve_secret``/``build_sinks``, which hand it to
the one secret resolver (``wtwin.sinks.secrets``). The other readers: ``sdnotify.py`` reads
systemd's own variables (``NOTIFY_SOCKET``, ``WATCHDOG_USEC``, ``WATCHDOG_PID``), and
``preflight.py`` (``wtwind --check``) hands ``os.environ`` to this module's resolvers.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from wtwin.emitters.endpoints import DEFAULT_ENDPOINT, default_ipc_endpoint
from wtwin.emitters.bounds import MAX_CONFIG_BYTES
from wtwin.emitters.wire import DEFAULT_MAX_FRAME_BYTES
from wtwin.sinks import registry, secrets
from wtwin.sinks.log import LogConfig as LogSinkConfig
from wtwin.sinks.registry import AnySinkConfig, DeliveryConfig
from wtwin.sinks.routing import RouteConfig

from ..errors import ConfigError, require
from ..jobs.config import JobsConfig
from ..store.config import StateConfig, default_state_path
from .curve import CurveConfig
from .load import apply_env, build


@dataclass(frozen=True, kw_only=True)
class ListenConfig:
    """Where the ROUTER socket binds, and how much it accepts (daemon/inbound.py): bytes
    queued per connection (``peer_queue_bytes``) and for ``max_connections`` of them
    (``queue_bytes``; the per-connection queue is sized once, from their share), and each peer's share of the handlers' time while peers contend (a token bucket of
    seconds: ``peer_loop_share`` a second, ``peer_burst_s`` deep; all of them together
    ``loop_share``)."""

    endpoints: tuple[str, ...] = (DEFAULT_ENDPOINT, "tcp://127.0.0.1:5557")
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ipc_mode: str = "0660"
    ipc_group: str | None = None
    queue_bytes: int = 128 * 2**20
    peer_queue_bytes: int = 16 * 2**20
    max_connections: int = 64
    peer_loop_share: float = 0.1
    peer_burst_s: float = 2.0
    loop_share: float = 0.3

    def __post_init__(self) -> None:
        require(len(self.endpoints) > 0, "endpoints: at least one endpoint is needed")
        for ep in self.endpoints:
            require(ep.startswith(("tcp://", "ipc://")),
                    f"endpoints: {ep!r} must start with tcp:// or ipc://")
        require(1024 <= self.max_frame_bytes <= 1 << 30,
                "max_frame_bytes: must be between 1024 and 2^30 bytes")
        require(len(self.ipc_mode) in (3, 4) and all(c in "01234567" for c in self.ipc_mode),
                f"ipc_mode: {self.ipc_mode!r} is not an octal mode like '0660'")
        require(self.peer_queue_bytes >= self.max_frame_bytes,
                "peer_queue_bytes: must hold at least one frame (>= max_frame_bytes)")
        require(self.queue_bytes >= self.peer_queue_bytes, "queue_bytes: must be >= peer_queue_bytes")
        require(1 <= self.max_connections <= 65536, "max_connections: must be in [1, 65536]")
        require(self.queue_bytes >= self.max_connections * self.max_frame_bytes,
                "queue_bytes: must hold one frame (max_frame_bytes) for each of max_connections")
        require(0 < self.peer_loop_share <= 1, "peer_loop_share: must be in (0, 1] (seconds a second)")
        require(0 < self.peer_burst_s <= 60, "peer_burst_s: must be in (0, 60] seconds")
        require(self.peer_loop_share <= self.loop_share <= 1,
                "loop_share: must be in [peer_loop_share, 1] (seconds a second, all peers)")


@dataclass(frozen=True, kw_only=True)
class HttpConfig:
    """The one HTTP port: /metrics, /healthz, /readyz (and the run pages).

    ``allowed_hosts``: Host names (optionally ``name:port``) accepted besides the bound
    address; ``token_env``/``token_file``: a bearer token that state-changing requests
    must carry (daemon/web/guard.py)."""

    host: str = "127.0.0.1"
    port: int = 9464
    allowed_hosts: tuple[str, ...] = ()
    token_env: str | None = None
    token_file: str | None = None
    body_timeout_s: float = 30.0  # an upload to /api/analyze must arrive within this
    header_timeout_s: float = 10.0  # a request's headers, from the connection or the last request
    keepalive_timeout_s: float = 15.0  # an idle keep-alive connection is closed after this
    max_connections: int = 256  # open at once (at most a quarter of the open-file limit)
    max_connections_per_client: int = 32  # open at once from one address
    probe_slots: int = 32  # connections past a cap that may still ask /healthz or /readyz

    def __post_init__(self) -> None:
        require(0 <= self.port <= 65535, f"port: {self.port} is not a TCP port (0..65535)")
        require(1 <= self.max_connections_per_client <= 65536, "max_connections_per_client: must be in 1..65536")
        require(1 <= self.probe_slots <= 1024, "probe_slots: must be in 1..1024")
        require(0 < self.body_timeout_s <= 3600, "body_timeout_s: must be in (0, 3600] seconds")
        require(0 < self.header_timeout_s <= 600, "header_timeout_s: must be in (0, 600] seconds")
        require(0 < self.keepalive_timeout_s <= 3600, "keepalive_timeout_s: must be in (0, 3600] seconds")
        require(1 <= self.max_connections <= 65536, "max_connections: must be in 1..65536")
        require(not (self.token_env and self.token_file), "token_env/token_file: set only one")

    def token(self, environ: Mapping[str, str] | None = None) -> str | None:
        value = resolve_secret("http.token", env=self.token_env, file=self.token_file, environ=environ)
        require(value is None or len(value) >= 16, "http.token: must be at least 16 characters")
        return value


@dataclass(frozen=True, kw_only=True)
class DetectionConfig:
    """Which detector preset new runs get, and when a silent run counts as stalled."""

    preset: str = "pretraining"
    stall_after_s: float = 300.0
    cooldown_s: float = 60.0

    def __post_init__(self) -> None:
        from wtwin.detect import PRESETS

        require(self.preset in PRESETS, f"preset: {self.preset!r} is not one of {PRESETS}")
        require(self.stall_after_s > 0, "stall_after_s: must be > 0 seconds")
        require(self.cooldown_s >= 0, "cooldown_s: must be >= 0 seconds")


@dataclass(frozen=True, kw_only=True)
class RunsConfig:
    """Bounds on the run table and on per-run metric series; who may write a run.

    The defaults fit wtwind in 2 GB of RSS under a flood of new runs or emitter ids
    (docs/RELIABILITY.md, "Memory under floods"); ``shared`` lists run-name globs that
    any client may write (docs/SECURITY.md)."""

    max_runs: int = 10_000
    max_runs_per_client: int = 1_000
    max_emitters_per_run: int = 64
    emitter_idle_s: float = 600.0
    max_config_bytes: int = 16 * 1024
    shared: tuple[str, ...] = ()
    idle_ttl_s: float = 24 * 3600.0
    ended_ttl_s: float = 600.0
    # a run that ended while an alert fired, or failed or was killed, keeps its series
    # (and that alert) this long
    ended_series_s: float = 900.0
    max_series_runs: int = 1000
    # per-run free text a client may make the daemon keep
    max_kind_chars: int = 64          # run_start.kind; a rewind's kind and checkpoint name
    max_eval_metrics: int = 16        # eval metrics kept as the run's last values
    max_rewinds_kept: int = 32        # rewind audit records kept per run
    max_references: int = 4           # references a run may name (docs/REFERENCES.md)
    reference_resolve_s: float = 60.0  # incomplete references looked up again after (doubling)
    # every run's reference curves together (about 211 bytes a point held: some 160 MB;
    # the limits' sum, daemon/memory_sum.py)
    max_reference_points: int = 750_000

    def __post_init__(self) -> None:
        require(1 <= self.max_kind_chars <= 4096, "max_kind_chars: must be in [1, 4096]")
        require(1 <= self.max_eval_metrics <= 64, "max_eval_metrics: must be in [1, 64] (the wire's bound)")
        require(0 <= self.max_rewinds_kept <= 1024, "max_rewinds_kept: must be in [0, 1024]")
        require(0 <= self.max_references <= 8, "max_references: must be in [0, 8] (the wire's bound)")
        require(self.reference_resolve_s > 0, "reference_resolve_s: must be > 0 seconds")
        require(self.max_reference_points >= 0, "max_reference_points: must be >= 0")
        require(self.max_runs >= 1, "max_runs: must be >= 1")
        require(self.max_runs_per_client >= 1, "max_runs_per_client: must be >= 1")
        require(self.max_emitters_per_run >= 1, "max_emitters_per_run: must be >= 1")
        require(self.emitter_idle_s >= 0, "emitter_idle_s: must be >= 0 seconds")
        require(1 <= self.max_config_bytes <= MAX_CONFIG_BYTES,
                f"max_config_bytes: must be in [1, {MAX_CONFIG_BYTES}] (the wire's bound)")
        require(self.ended_series_s >= 0, "ended_series_s: must be >= 0 seconds")
        require(self.idle_ttl_s > 0 and self.ended_ttl_s >= 0, "idle_ttl_s/ended_ttl_s: must be > 0")
        require(self.max_series_runs >= 0, "max_series_runs: must be >= 0")


@dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """``[budget]``: the memory the daemon is sized to stay under. The bounds
    that keep it there are the other sections' (``[listen]`` queues and each peer's
    share, ``[runs]`` quotas and free text, the delivery's hold); ``/metrics`` shows the
    stated budget (``wtwind_memory_budget_bytes``) and what each
    bounded part holds against its limit (``wtwind_budget_items``). docs/SECURITY.md has
    the floods measured against it."""

    memory_bytes: int = 2 * 2**30

    def __post_init__(self) -> None:
        require(self.memory_bytes >= 64 * 2**20, "memory_bytes: must be >= 64 MiB")


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    level: str = "info"
    format: str = "auto"

    def __post_init__(self) -> None:
        require(self.level in ("debug", "info", "warning", "error"),
                f"level: {self.level!r} is not one of debug, info, warning, error")
        require(self.format in ("auto", "json", "console"),
                f"format: {self.format!r} is not one of auto, json, console")


_SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True, kw_only=True)
class ShardConfig:
    """This daemon's name among the shards (docs/SHARDING.md): shown on the run pages and
    in ``/metrics`` (``wtwind_shard_info``). None: a single daemon, nothing is shown.
    ``[shard] name``, ``WTWIND_SHARD__NAME`` or ``wtwind --shard NAME``; in a StatefulSet
    the pod's name. Letters, digits, ``.``, ``_``, ``-``; at most 63 characters."""

    name: str | None = None

    def __post_init__(self) -> None:
        require(self.name is None or _SHARD_NAME.fullmatch(self.name) is not None,
                f"name: {self.name!r} is not a shard name (letters, digits, '.', '_', '-'; "
                "starting with a letter or digit; at most 63 characters)")


@dataclass(frozen=True, kw_only=True)
class DaemonConfig:
    listen: ListenConfig = field(default_factory=ListenConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    detection: DetectionConfig = field(default_factory=DetectionConfig)
    runs: RunsConfig = field(default_factory=RunsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    shutdown_timeout_s: float = 10.0
    tick_s: float = 1.0
    state: StateConfig = field(default_factory=StateConfig)
    curve: CurveConfig = field(default_factory=CurveConfig)
    delivery: DeliveryConfig = field(default_factory=DeliveryConfig)
    # [[sinks]]: a union tagged by ``type`` (wtwin.sinks.registry); the default is one log sink
    sinks: tuple[AnySinkConfig, ...] = (LogSinkConfig(),)
    routes: tuple[RouteConfig, ...] = ()
    shard: ShardConfig = field(default_factory=ShardConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)

    def __post_init__(self) -> None:
        require(self.shutdown_timeout_s > 0, "shutdown_timeout_s: must be > 0 seconds")
        require(0 < self.tick_s <= 60, "tick_s: must be in (0, 60] seconds")
        registry.check_sinks(self.sinks, self.routes)


def load(path: str | os.PathLike | None = None,
         environ: Mapping[str, str] | None = None, *, shard: str | None = None) -> DaemonConfig:
    """Read ``path`` (or embedded defaults when None), overlay the environment, then
    ``shard`` (``wtwind --shard``) when given."""
    environ = os.environ if environ is None else environ
    data: dict = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{p}: config file not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: cannot read config: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    raw = apply_env(data, environ)
    if shard is not None:
        section = raw.setdefault("shard", {})
        if not isinstance(section, dict):
            raise ConfigError("shard: expected a table ([shard] name = ...)")
        section["name"] = shard
    listen = raw.setdefault("listen", {})
    if isinstance(listen, dict) and "endpoints" not in listen:  # depends on the runtime dirs
        listen["endpoints"] = [default_ipc_endpoint(environ), "tcp://127.0.0.1:5557"]
    state = raw.setdefault("state", {})
    if isinstance(state, dict) and not state.get("path"):  # default that depends on $XDG_STATE_HOME
        state["path"] = default_state_path(environ)
    return build(DaemonConfig, raw)


def resolve_secret(where: str, *, env: str | None, file: str | None,
                   environ: Mapping[str, str] | None = None) -> str | None:
    """A secret by reference (``wtwin.sinks.secrets.resolve``, the one resolver), against
    the process environment unless ``environ`` is given: this module is the one reader of it."""
    return secrets.resolve(where, env, file, os.environ if environ is None else environ)


def build_sinks(cfg: DaemonConfig, environ: Mapping[str, str] | None = None) -> list:
    """Live sinks for ``cfg.sinks``; their secret references resolved against the environment."""
    return registry.build_sinks(cfg.sinks, os.environ if environ is None else environ)
