"""The per-run secret that binds a run to its trainer when CURVE is off (docs/SECURITY.md).

The daemon gives a run to the first client that writes to it and then takes events,
``run_end`` and alerts only from clients that prove the same principal: the CURVE client
key when CURVE is on, otherwise this secret. Emitter ids change with every process, so
they cannot be the principal; the secret must survive a trainer restart. It is, in order:

1. the ``secret`` argument of the emitter;
2. the environment variable ``WTWIN_RUN_SECRET`` (a scheduler can inject it);
3. the file ``<dir>/<run>.wtwin-secret``, created (mode 0600) at the run's first start
   and read back by a resumed trainer, where ``<dir>`` is ``$WTWIN_SECRET_DIR`` (the
   operator's choice wins), else the ``secret_dir`` argument, else
   ``$XDG_STATE_HOME/wtwin/runs`` (``~/.local/state/wtwin/runs``).

Never in a folder that gets published: the HF and Lightning callbacks use the state
directory, not ``output_dir`` (``push_to_hub`` uploads that folder). A secret an older
version left in ``output_dir`` is moved to the state directory (``adopt``).

The daemon stores only a hash of it and never shows it. Stdlib only (trainer side).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import warnings
from pathlib import Path
from typing import Mapping

ENV_SECRET = "WTWIN_RUN_SECRET"
ENV_DIR = "WTWIN_SECRET_DIR"


def secret_dir(environ: Mapping[str, str] | None = None, hint: str | os.PathLike | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    if hint is not None:
        return Path(hint)
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(env.get("XDG_STATE_HOME") or Path(home) / ".local" / "state") / "wtwin" / "runs"


def secret_path(run: str, directory: str | os.PathLike) -> Path:
    """``<dir>/<run>.wtwin-secret``; a run name that is not a plain file name gets a hash suffix."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run)[:100]
    if safe != run:
        safe += "-" + hashlib.sha256(run.encode()).hexdigest()[:12]
    return Path(directory) / f"{safe}.wtwin-secret"


def where(run: str, directory: str | os.PathLike | None = None,
          environ: Mapping[str, str] | None = None) -> str:
    """Where ``load_or_create`` finds this run's secret, in words for a log line."""
    env = os.environ if environ is None else environ
    if env.get(ENV_SECRET):
        return f"${ENV_SECRET}"
    return str(secret_path(run, secret_dir(env, directory)))


def load_or_create(run: str, directory: str | os.PathLike | None = None,
                   environ: Mapping[str, str] | None = None) -> str:
    """The run's secret from the environment or its file, creating the file if absent.

    Raises OSError when the file can be neither read nor created."""
    env = os.environ if environ is None else environ
    if env.get(ENV_SECRET):
        return env[ENV_SECRET]
    path = secret_path(run, secret_dir(env, directory))
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another rank or process created it first: use theirs
        return _read(path)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def adopt(run: str, old_dir: str | os.PathLike | None,
          environ: Mapping[str, str] | None = None) -> Path | None:
    """Move ``<old_dir>/<run>.wtwin-secret`` (where older callbacks wrote it: a folder a hub
    upload sends) to the state directory, unless one is there already; then delete it from
    ``old_dir``. Returns where the secret now is, or None when there was nothing to move.
    Raises OSError when the move fails."""
    if old_dir is None:
        return None
    env = os.environ if environ is None else environ
    old = secret_path(run, old_dir)
    new = secret_path(run, secret_dir(env))
    if not old.is_file() or old.resolve() == new.resolve():
        return None
    if not new.exists():
        new.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_read(old) + "\n")
    old.unlink()
    return new


def move_out_of(run: str | None, folder) -> None:
    """``adopt`` for the callbacks: never raises (a failure is one warning)."""
    if run and folder:
        try:
            adopt(run, folder)
        except OSError as exc:
            warnings.warn(f"wtwin: could not move the run secret out of {folder}: {exc}",
                          stacklevel=3)


def _read(path: Path) -> str:
    value = path.read_text().strip()
    if not value:
        raise OSError(f"{path} is empty")
    return value
