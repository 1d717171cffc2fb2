"""The ``[state]`` and ``[curve]`` config sections (owned by the store and security code).

``[state]``: where the SQLite database lives and how often run state is written.
``[curve]``: CURVE encryption/authentication for the ROUTER socket. Secrets only by
reference: the server's secret key comes from a key file (``*_file``) or an
environment variable (``*_env``), never from the TOML itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import ConfigError

SYNC_MODES = ("normal", "full")


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class StateConfig:
    """Durable state: run registry, detector snapshots, per-emitter seqs, alert outbox.

    ``path`` empty means ``$XDG_STATE_HOME/wtwind/wtwind.db`` (``~/.local/state/...``).
    Run snapshots are written by a writer thread every ``flush_interval_s``, sooner once
    ``flush_max_events`` events are unwritten, and at shutdown. Snapshots are taken on the
    event loop, so periodic ones are paced to at most ``flush_share`` of the loop's time:
    with thousands of busy runs the interval stretches instead of the loop stalling (the
    emitters keep the unacknowledged events meanwhile). ``synchronous`` is the
    SQLite mode for those (``normal`` survives a process crash, ``full`` also power
    loss), and for delivery outcomes. Alert and new outbox rows are always committed with
    ``synchronous=FULL``.
    """

    enabled: bool = True
    path: str = ""
    flush_interval_s: float = 0.5
    flush_max_events: int = 50_000
    flush_share: float = 0.1
    synchronous: str = "normal"
    busy_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        _require(0.01 <= self.flush_interval_s <= 60, "flush_interval_s: must be in [0.01, 60] seconds")
        _require(self.flush_max_events >= 1, "flush_max_events: must be >= 1")
        _require(0 < self.flush_share <= 1, "flush_share: must be in (0, 1] (a fraction of the loop's time)")
        _require(self.synchronous in SYNC_MODES, f"synchronous: {self.synchronous!r} is not one of {SYNC_MODES}")
        _require(self.busy_timeout_s >= 0, "busy_timeout_s: must be >= 0")


def default_state_path(environ: Mapping[str, str]) -> str:
    home = environ.get("HOME") or os.path.expanduser("~")
    base = environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return str(Path(base) / "wtwind" / "wtwind.db")


@dataclass(frozen=True, kw_only=True)
class CurveConfig:
    """CURVE for the ROUTER socket; on when a server secret key is configured.

    ``server_key_file`` is a ``zmq.auth`` secret certificate (``wtwind keys generate``
    writes one, mode 0600) or ``server_key_env`` names a variable holding the Z85
    secret key. Clients are allowed by public key: ``allowed_clients`` (Z85 strings;
    public keys are not secrets) and/or every ``*.key`` certificate in
    ``allowed_clients_dir``. ZeroMQ security is per socket, so with CURVE on every
    endpoint (ipc included) requires it.
    """

    server_key_file: str | None = None
    server_key_env: str | None = None
    allowed_clients: tuple[str, ...] = ()
    allowed_clients_dir: str | None = None

    def __post_init__(self) -> None:
        _require(not (self.server_key_file and self.server_key_env),
                 "server_key_file/server_key_env: set only one")
        for key in self.allowed_clients:
            _require(len(key) == 40, f"allowed_clients: {key[:8]}... is not a 40-char Z85 public key")
        _require(not self.enabled or bool(self.allowed_clients or self.allowed_clients_dir),
                 "allowed_clients/allowed_clients_dir: CURVE needs an allow-list of client keys")

    @property
    def enabled(self) -> bool:
        return bool(self.server_key_file or self.server_key_env)
