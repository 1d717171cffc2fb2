"""The daemon's few exception types (``ConfigError`` is the package's one, from wtwin.detect)."""

from wtwin.detect.errors import ConfigError, require  # noqa: F401  (re-exported)
from wtwin.emitters.wire import WireError  # noqa: F401  (re-exported)
