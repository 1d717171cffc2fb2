"""`wtwind --check`: everything start-up would load, loaded, without starting anything.

A config that passes ``--check`` must not then fail at start for a file it names: the CURVE server key and every allowed client key are read, the HTTP token
resolved, the sinks' secret references resolved, the store's database opened read-only
(integrity and schema version) or its folder found writable, and each ipc socket's
folder checked for its owner and mode. Nothing is created, bound or locked: a running
daemon on the same store does not make ``--check`` fail.

It also refuses limits that add up to more than ``[budget] memory_bytes`` at worst
(daemon/memory_sum.py), and an HTTP port bound beyond loopback with neither ``[http] allowed_hosts``
(which turns the Host check on: DNS rebinding) nor a token.

``problems(cfg)`` returns every problem found, in words; none means the config is good.
"""

from __future__ import annotations

import ipaddress
import os
import sqlite3
from pathlib import Path
from typing import Mapping

from .config import DaemonConfig, build_sinks
from .errors import ConfigError
from .memory_sum import over_budget


def problems(cfg: DaemonConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    out = []
    for check in (_sinks, _curve, _http_token, _exposure, _store, _ipc_dirs, _memory):
        try:
            check(cfg, env)
        except ConfigError as exc:
            out.append(str(exc))
    return out


def _memory(cfg, env) -> None:
    problem = over_budget(cfg)   # the limits' worst case over [budget] memory_bytes
    if problem:
        raise ConfigError(problem)


def _sinks(cfg, env) -> None:
    build_sinks(cfg, environ=env)  # secret references resolve (nothing is sent)


def _curve(cfg, env) -> None:
    if not cfg.curve.enabled:
        return
    from .zmq_auth import allowed_keys, server_keys

    server_keys(cfg.curve, environ=env)
    allowed_keys(cfg.curve)


def _http_token(cfg, env) -> None:
    cfg.http.token(environ=env)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _exposure(cfg, env) -> None:
    http = cfg.http
    if loopback(http.host) or http.allowed_hosts or http.token_env or http.token_file:
        return
    raise ConfigError(f"http.host: {http.host!r} is reachable beyond this machine with neither "
                      "[http] allowed_hosts (the Host check that stops DNS rebinding) nor a token "
                      "(token_env/token_file); set one, or bind 127.0.0.1 (docs/SECURITY.md)")


def _store(cfg, env) -> None:
    state = cfg.state
    if not (state.enabled and state.path):
        return
    path = Path(state.path)
    if not path.exists():
        _writable_ancestor(path.parent, "state.path", f"cannot create {path}")
        return
    from .store.db import SCHEMA_VERSION

    if not os.access(path, os.R_OK | os.W_OK):
        raise ConfigError(f"state.path: {path} is not readable and writable by this user")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"state.path: {path} is not a readable wtwind database ({exc})") from None
    if ok != "ok":
        raise ConfigError(f"state.path: {path} is corrupt (integrity check: {ok})")
    if version > SCHEMA_VERSION:
        raise ConfigError(f"state.path: {path} has schema version {version}, written by a newer "
                          f"wtwind; this one understands up to {SCHEMA_VERSION}")


def _ipc_dirs(cfg, env) -> None:
    from .receiver import secure_ipc_dir

    for ep in cfg.listen.endpoints:
        if not ep.startswith("ipc://"):
            continue
        folder = Path(ep[len("ipc://"):]).parent
        if folder.is_dir():
            secure_ipc_dir(str(folder))  # owner and mode; an existing folder is not changed
        else:
            _writable_ancestor(folder, "listen.endpoints", f"cannot create {folder}")


def _writable_ancestor(folder: Path, key: str, what: str) -> None:
    """The nearest existing ancestor of ``folder`` lets this user create it."""
    here = folder.resolve()
    while not here.exists():
        here = here.parent
    if not here.is_dir() or not os.access(here, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: {what}: {here} is not writable by this user")
