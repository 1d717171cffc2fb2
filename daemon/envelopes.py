"""The ROUTER socket's messages as (identity, frame) pairs, at the raw loop's cost.

A client's message reaches the ROUTER as two parts: the connection's identity, then the
frame. ``Envelopes.next()`` returns ``(identity, frame)`` (both ``bytes``),
``(identity, None)`` for a message of more parts (its other parts are received and
dropped: not ours), or None when nothing waits; it never blocks.

Two ways to the same pairs:

- the pure build: two ``recv`` calls, the second without copy, whose ``Frame.more``
  says whether parts follow (``getsockopt(RCVMORE)`` costs as much as both receives:
  pyzmq looks the option up in its enum on every call);
- the compiled build (``daemon/build.py``): the same two receives as C calls into the
  libzmq that pyzmq loaded (its functions found by ``ctypes`` in this process's own
  mappings), each part copied once into ``bytes`` and its "more" flag read from the
  message itself. Where that libzmq cannot be found (not Linux, or several loaded) the
  pure way runs.

``close()`` must come before the socket's: the compiled way holds its C handle.
"""

from __future__ import annotations

import errno
import os

import zmq

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython

_NAMES = ("zmq_msg_init", "zmq_msg_recv", "zmq_msg_more", "zmq_msg_close", "zmq_msg_data",
          "zmq_msg_size", "zmq_msg_gets")


def libzmq_functions() -> tuple[int, ...] | None:
    """The addresses of `_NAMES` in the one libzmq this process has loaded (pyzmq's), or
    None where it cannot be told which one that is."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps
                     if line.count(" ") >= 5 and "libzmq" in os.path.basename(line.rstrip())}
    except (OSError, IndexError):
        return None
    if len(paths) != 1 or not hasattr(os, "RTLD_NOLOAD"):
        return None
    try:  # the library already mapped, never a second copy
        lib = ctypes.CDLL(paths.pop(), mode=os.RTLD_NOW | os.RTLD_NOLOAD)
        return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in _NAMES)
    except (OSError, AttributeError):
        return None


class Envelopes:
    def __init__(self, sock: zmq.Socket, native: bool = True) -> None:
        """``native``: the compiled build's C receive where it can run (False: the pure
        way in both builds, for tests)."""
        self.sock = sock
        self.native = False
        self._handle = 0
        if cython.compiled and native:
            fns = libzmq_functions()
            if fns is not None and all(fns):
                wt_bind(fns[0], fns[1], fns[2], fns[3], fns[4], fns[5], fns[6])  # noqa: F821 (envelopes.pxd)
                self._handle = sock.underlying
                self.native = True

    def next(self):
        """``(identity, frame)``, ``(identity, None)`` for a message that is not one
        identity and one frame, or None when nothing waits."""
        return self._native(0) if self.native else self._next_py()

    def next_with_user(self):
        """``next`` with a third item: the frame's ZAP User-Id (the CURVE client's key;
        None for a message that is not ours); a frame without one raises ZMQError
        (EINVAL), as pyzmq's ``Frame.get`` does."""
        return self._native(1) if self.native else self._next_py(True)

    def _native(self, with_user: int):
        got = wt_recv(self._handle, with_user)  # noqa: F821 (declared in envelopes.pxd)
        if type(got) is tuple:
            return got
        if got == errno.EAGAIN:
            return None
        raise zmq.ZMQError(got)

    def _next_py(self, with_user: bool = False):
        recv, nowait = self.sock.recv, zmq.NOBLOCK
        try:
            identity = recv(nowait)
            frame = recv(nowait, copy=False)  # a ZeroMQ message arrives whole
        except zmq.Again:
            return None
        if not frame.more:
            if with_user:
                return identity, frame.bytes, frame.get("User-Id")
            return identity, frame.bytes
        while recv(nowait, copy=False).more:
            pass
        return (identity, None, None) if with_user else (identity, None)

    def close(self) -> None:
        """The socket closes next: the C receive stops (the pure one raises from then on)."""
        self.native = False
        self._handle = 0
