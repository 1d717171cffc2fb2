"""The detection library's one exception type (the daemon re-exports it)."""


class ConfigError(ValueError):
    """A parameter or config value that cannot be used; the message names it and why."""
