"""``[curve]``: the CURVE section of the daemon's config (daemon/zmq_auth.py applies it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import require


@dataclass(frozen=True, kw_only=True)
class CurveConfig:
    """``[curve]``: CURVE for the ROUTER socket; on when a server secret key is configured.

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
        require(not (self.server_key_file and self.server_key_env),
                "server_key_file/server_key_env: set only one")
        for key in self.allowed_clients:
            require(len(key) == 40, f"allowed_clients: {key[:8]}... is not a 40-char Z85 public key")
        require(not self.enabled or bool(self.allowed_clients or self.allowed_clients_dir),
                "allowed_clients/allowed_clients_dir: CURVE needs an allow-list of client keys")

    @property
    def enabled(self) -> bool:
        return bool(self.server_key_file or self.server_key_env)
