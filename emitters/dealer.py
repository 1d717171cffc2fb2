"""The emitter's DEALER socket: options, CURVE keys, and the checks before it connects.

An endpoint that cannot be trusted (an ipc path someone else could have put there,
``ipc_trust.py``) or that cannot be connected is said once in the trainer's log and
counted; the emitter then drops its events instead of raising into the training loop.
"""

from __future__ import annotations

import collections

import zmq

from . import ipc_trust
from .reach import log


def open_dealer(endpoint: str, linger_ms: int, curve: dict | None,
                stats: collections.Counter) -> zmq.Socket | None:
    """The DEALER connected to ``endpoint``, or None when it must not or cannot be."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.SNDHWM, 1000)
    sock.setsockopt(zmq.RCVHWM, 1000)
    if curve:
        sock.curve_secretkey = curve["secret_key"]
        sock.curve_publickey = curve["public_key"]
        sock.curve_serverkey = curve["server_key"]
    untrusted = ipc_trust.problem(endpoint)
    if untrusted:
        stats["untrusted_endpoint"] += 1
        log.warning("wtwin: not connecting to %s: %s. This run's events are dropped; point "
                    "WTWIN_ENDPOINT at your wtwind's socket", endpoint, untrusted)
        sock.close(linger=0)
        return None
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        stats["connect_errors"] += 1
        log.warning("wtwin: cannot connect to wtwind at %s (%s); this run's events are dropped",
                    endpoint, exc)
        sock.close(linger=0)
        return None
    return sock
