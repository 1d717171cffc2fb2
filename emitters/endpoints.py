"""Where the emitter connects by default: ``$WTWIN_ENDPOINT``, else the local ipc socket.

The daemon's config reads the same default (``default_ipc_endpoint``), so a trainer and
a wtwind started with no settings meet on one socket.
"""

from __future__ import annotations

import os

from . import ipc_trust

DEFAULT_ENDPOINT = "ipc:///run/wtwind/wtwind.sock"  # a system wtwind's RuntimeDirectory


def default_ipc_endpoint(environ=None) -> str:
    """Where the local ipc socket is, the same for the daemon and its trainers: a system
    daemon's ``/run/wtwind`` (systemd ``RuntimeDirectory=wtwind``, mode 0750: the trainers'
    group may connect, nobody else may create anything there) when it exists, else the
    user's ``$XDG_RUNTIME_DIR/wtwind``, else ``/tmp/wtwind-<uid>`` (created 0750 by the
    daemon, refused if someone else owns it). Never a shared name in ``/tmp``, which any
    local user could squat."""
    env = os.environ if environ is None else environ
    if env.get("RUNTIME_DIRECTORY"):  # the daemon under systemd
        return f"ipc://{env['RUNTIME_DIRECTORY'].split(':')[0]}/wtwind.sock"
    if os.path.isdir("/run/wtwind"):
        return DEFAULT_ENDPOINT
    if env.get("XDG_RUNTIME_DIR"):
        return f"ipc://{env['XDG_RUNTIME_DIR']}/wtwind/wtwind.sock"
    return f"ipc://{ipc_trust.default_tmp_folder()}/wtwind.sock"


def default_endpoint() -> str:
    """``$WTWIN_ENDPOINT`` (one endpoint, or several separated by commas or whitespace:
    the shards, ``shards.py``), else the local socket."""
    return os.environ.get("WTWIN_ENDPOINT") or default_ipc_endpoint()
