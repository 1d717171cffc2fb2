"""ZeroMQ CURVE for the ROUTER socket: encryption and client authentication (ZAP), as
the ``[curve]`` section (``daemon/config/curve.py``) asks.

The server's key pair comes from a ``zmq.auth`` secret certificate file or from an
environment variable holding the Z85 secret key (never from the TOML). Clients are
allowed by public key; a ZAP handler (pyzmq's ``ThreadAuthenticator``) refuses every
other key during the handshake, so an unknown client's frames never reach the
daemon, and each refusal is counted. Logs show only public keys, never secrets.
``zmq.auth`` is imported only when CURVE is used (loading the config does not).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import structlog
import zmq

from .config import resolve_secret  # secrets resolve in one place
from .config.curve import CurveConfig
from .errors import ConfigError, require
from .logsetup import RateLimited

log = structlog.get_logger("wtwind.curve")


def generate_keys(directory: str, name: str = "wtwind") -> tuple[str, str]:
    """Write ``NAME.key`` (public, mode 0644: it is handed to others) and ``NAME.key_secret``
    (mode 0600), in a folder created 0700."""
    import zmq.auth

    Path(directory).mkdir(parents=True, exist_ok=True, mode=0o700)
    old = os.umask(0o077)  # no window in which the secret is readable by others
    try:
        public, secret = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(secret, 0o600)
    os.chmod(public, 0o644)
    return public, secret


def server_keys(cfg: CurveConfig, environ: Mapping[str, str] | None = None) -> tuple[bytes, bytes]:
    """(public, secret) of the server, from the key file or the named variable."""
    import zmq.auth

    if cfg.server_key_file:
        try:
            public, secret = zmq.auth.load_certificate(cfg.server_key_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"curve.server_key_file: cannot read {cfg.server_key_file}: {exc}") from None
        if not secret:
            raise ConfigError(f"curve.server_key_file: {cfg.server_key_file} has no secret key "
                              "(give the .key_secret file)")
        return public, secret
    secret_txt = resolve_secret("curve.server_key", env=cfg.server_key_env, file=None, environ=environ) or ""
    require(len(secret_txt) == 40, f"curve.server_key_env: {cfg.server_key_env} is not a 40-char Z85 key")
    secret = secret_txt.encode()
    return zmq.curve_public(secret), secret


def allowed_keys(cfg: CurveConfig) -> set[bytes]:
    import zmq.auth

    keys = {k.encode() for k in cfg.allowed_clients}
    if cfg.allowed_clients_dir:
        folder = Path(cfg.allowed_clients_dir)
        if not folder.is_dir():
            raise ConfigError(f"curve.allowed_clients_dir: {folder} is not a directory")
        for path in sorted(folder.glob("*.key")):
            try:
                keys.add(zmq.auth.load_certificate(str(path))[0])
            except (OSError, ValueError) as exc:
                raise ConfigError(f"curve.allowed_clients_dir: cannot read {path}: {exc}") from None
    return keys


class CurveGuard:
    """The ZAP handler plus its counters; ``collect`` yields its metric families."""

    def __init__(self, cfg: CurveConfig, environ: Mapping[str, str] | None = None) -> None:
        self.public, self._secret = server_keys(cfg, environ)
        self.allowed = allowed_keys(cfg)
        self.refused = 0
        self.accepted = 0
        self._auth = None  # the ThreadAuthenticator, once started
        self._log = RateLimited(log)

    def callback(self, domain: str, key: bytes) -> bool:  # runs on the ZAP thread
        if key in self.allowed:  # pyzmq passes the client's public key in Z85
            self.accepted += 1
            return True
        self.refused += 1
        self._log.warning("curve_client_refused", "refused", client_public_key=key.decode(errors="replace"))
        return False

    def start(self, sock: zmq.Socket, ctx: zmq.Context) -> None:
        from zmq.auth.thread import ThreadAuthenticator

        self._auth = ThreadAuthenticator(ctx)
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=self)
        sock.curve_server = True
        sock.curve_secretkey = self._secret
        sock.curve_publickey = self.public
        log.info("curve_enabled", server_public_key=self.public.decode(), allowed_clients=len(self.allowed))

    def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def describe(self):
        from .described import described

        return described(counters=("wtwind_curve_handshakes",))

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        fam = CounterMetricFamily("wtwind_curve_handshakes", "CURVE client handshakes by outcome",
                                  labels=["outcome"])
        fam.add_metric(["accepted"], self.accepted)
        fam.add_metric(["refused"], self.refused)
        yield fam
