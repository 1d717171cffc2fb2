"""The one secret resolver: ``<field>_env`` names an environment variable, ``<field>_file``
a file. Used by the sinks (webhook URLs, signing secrets, headers), the HTTP token and the
CURVE server key.

Secrets never live in the TOML itself, and only the daemon's config module reads the
process environment: it passes that mapping here. An empty secret is an error, never a
silent "no secret": an unset or empty variable, or an empty file, would otherwise turn
signing or authentication off without a word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from wtwin.detect.errors import ConfigError, require


def check_ref(field: str, env_name: str | None, file_path: str | None, *, required: bool) -> None:
    """Validate an ``<field>_env`` / ``<field>_file`` pair at config time."""
    require(env_name is None or file_path is None, f"{field}_env/{field}_file: set only one of {field}_env and {field}_file")
    require(not required or env_name is not None or file_path is not None,
            f"{field}_env or {field}_file is required")
    for name, value in ((f"{field}_env", env_name), (f"{field}_file", file_path)):
        require(value is None or (isinstance(value, str) and bool(value)), f"{name} must be a non-empty string")


def resolve(where: str, env_name: str | None, file_path: str | None, env: Mapping[str, str]) -> str | None:
    """The secret the reference points at (stripped); None when neither is given.

    ``where`` is the dotted name of the field without its suffix (``sinks.team.url``);
    the ConfigError names ``<where>_env`` or ``<where>_file`` and what is wrong: the
    variable is unset, or set but empty; the file is unreadable, or empty.
    """
    if env_name:
        require(env_name in env, f"{where}_env: environment variable {env_name} is unset")
        value = env[env_name].strip()
        require(bool(value), f"{where}_env: environment variable {env_name} is empty; an empty secret is refused")
        return value
    if file_path:
        try:
            value = Path(file_path).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}_file: cannot read {file_path}: {getattr(exc, 'strerror', None) or exc}") from None
        require(bool(value), f"{where}_file: {file_path} is empty; an empty secret is refused")
        return value
    return None
