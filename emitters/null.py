"""`NullEmitter`: the emitter's interface, doing nothing (``WTWIN_DISABLE=1``, non-zero ranks)."""

from __future__ import annotations


class NullEmitter:
    """Does nothing, costs nothing: used when ``WTWIN_DISABLE=1`` or on non-zero ranks."""

    run = None
    endpoint = None
    endpoints = ()
    on_alert = None

    def __init__(self, *args, **kwargs) -> None:
        self.run = kwargs.get("run")

    def loss(self, *a, **k) -> None: ...
    def eval(self, *a, **k) -> None: ...
    def scalar(self, *a, **k) -> None: ...
    def checkpoint(self, *a, **k) -> None: ...
    def heartbeat(self) -> None: ...
    def rewind(self, *a, **k) -> None: ...
    def poll(self) -> int:
        return 0
    def close(self, *a, **k) -> None: ...

    @property
    def stats(self) -> dict[str, int]:
        return {"dropped": 0, "queued": 0, "sent": 0}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None: ...
