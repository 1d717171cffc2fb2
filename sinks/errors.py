"""The exception types the sinks raise: ``SinkError`` and the package's one ``ConfigError``.

``ConfigError`` is ``wtwin.detect.errors.ConfigError`` (one class for detectors, sinks and
daemon), re-exported here. ``SinkError`` is what a sink's ``send`` raises for an answer
it did not like; ``sinks.retry.classify`` turns it (and connection errors, timeouts)
into retry / don't-retry / disable.
"""

from __future__ import annotations

from wtwin.detect.errors import ConfigError  # noqa: F401  (re-exported)


class SinkError(Exception):
    """A delivery attempt that failed.

    ``status`` is the HTTP status when there was an answer; ``retry_after`` the
    server's ``Retry-After`` in seconds when it sent one; ``disable`` means the
    endpoint is gone for good (Slack 404/410/``no_service``) and the sink must stop.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str = "",
        retry_after: float | None = None,
        disable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after = retry_after
        self.disable = disable
