"""Shared by the benchmarks: a producer process that sends pre-encoded frames on release."""

from __future__ import annotations


def send_when_released(endpoint: str, frames: list[bytes], go) -> None:
    """Connect a DEALER, wait for the ``go`` event, send every frame (blocking), close."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    # every frame reaches the consumer, however slow (a busy host): the context's term
    # waits for the frames still queued (a process that just exits drops them)
    sock.setsockopt(zmq.LINGER, -1)
    sock.connect(endpoint)
    go.wait()
    for f in frames:
        sock.send(f)
    sock.close()
    ctx.term()
