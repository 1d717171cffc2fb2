"""The daemon's few exception types."""

from wtwin.emitters.wire import WireError  # noqa: F401  (re-exported)


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the dotted key and why."""
