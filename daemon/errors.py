"""The daemon's few exception types."""

from wtwin.detect.errors import ConfigError  # noqa: F401  (one ConfigError for daemon and detectors)
from wtwin.emitters.wire import WireError  # noqa: F401  (re-exported)
