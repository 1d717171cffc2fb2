"""The one ``ConfigError`` of the whole package, and the checks that raise it.

The detectors, the sinks and the daemon all validate their arguments and config with
these (``wtwin.sinks.errors`` and ``wtwin.daemon.errors`` re-export ``ConfigError``). It
lives here, in the lowest package that needs it, because the detectors run without the
daemon or the sinks (in a trainer's process). Messages name the field first
(``"timeout_s must be a finite number > 0, got 0"``); the config loader prefixes the
dotted path of the section (``"sinks[0].timeout_s ..."``).
"""

from __future__ import annotations

import math
from typing import Any


class ConfigError(ValueError):
    """A parameter or config value that cannot be used; the message names it and why."""


def require(ok: bool, message: str) -> None:
    """Raise `ConfigError` with ``message`` unless ``ok``."""
    if not ok:
        raise ConfigError(message)


def check(ok: bool, name: str, value: Any, what: str) -> None:
    """Raise `ConfigError` naming ``name``, what it must be and the value given, unless ``ok``."""
    if not ok:
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def positive(name: str, value: Any, *, integer: bool = False) -> None:
    """``value`` is a finite number > 0 (an int > 0 with ``integer``); booleans are refused."""
    kinds = (int,) if integer else (int, float)
    check(isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
          and value > 0, name, value, "an int > 0" if integer else "a finite number > 0")


def fraction(name: str, value: Any, lo: float = 0.0, hi: float = 1.0) -> None:
    """``lo < value < hi``."""
    check(isinstance(value, (int, float)) and lo < value < hi, name, value, f"in ({lo}, {hi})")
