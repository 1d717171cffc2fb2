"""Secrets by reference: ``*_env`` names an environment variable, ``*_file`` a file.

Only the daemon's config module reads the process environment; it passes that
mapping here. Secrets never live in the TOML itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .errors import ConfigError


def check_ref(owner: str, field: str, env_name: str | None, file_path: str | None, *, required: bool) -> None:
    """Validate an ``<field>_env`` / ``<field>_file`` pair at config time."""
    if env_name is not None and file_path is not None:
        raise ConfigError(f"{owner}: set only one of {field}_env and {field}_file")
    if required and env_name is None and file_path is None:
        raise ConfigError(f"{owner}: {field}_env or {field}_file is required")
    for name, value in ((f"{field}_env", env_name), (f"{field}_file", file_path)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{owner}: {name} must be a non-empty string")


def resolve(field: str, env_name: str | None, file_path: str | None, env: Mapping[str, str]) -> str | None:
    """Return the secret the reference points at (stripped), None when unset.

    Raises ConfigError naming the field when the variable is unset/empty or the
    file is unreadable/empty.
    """
    if env_name is not None:
        value = env.get(env_name, "").strip()
        if not value:
            raise ConfigError(f"{field}_env: environment variable {env_name} is unset or empty")
        return value
    if file_path is not None:
        try:
            value = Path(file_path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{field}_file: cannot read {file_path}: {exc.strerror}") from None
        if not value:
            raise ConfigError(f"{field}_file: {file_path} is empty")
        return value
    return None
