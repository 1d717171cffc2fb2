"""systemd's notify protocol over the stdlib socket: READY, WATCHDOG, STOPPING, STATUS.

``Notifier.from_env()`` reads ``NOTIFY_SOCKET`` (and ``WATCHDOG_USEC``/``WATCHDOG_PID``)
the way ``sd_notify(3)`` and ``sd_watchdog_enabled(3)`` do; without them every call is a
no-op, so the daemon behaves the same in a terminal, a container or under systemd.
An abstract socket name starts with ``@``. Sends never raise: a notify that cannot be
delivered is counted and the daemon goes on.

The server calls ``ready()`` once its sockets are bound and its state is loaded,
``tick(now)`` on every loop tick (a ``WATCHDOG=1`` at most every half watchdog period,
so a wedged loop stops pinging and systemd restarts it), and ``stopping()`` first thing
on shutdown.
"""

from __future__ import annotations

import os
import socket
from typing import Mapping


class Notifier:
    def __init__(self, address: str | None, *, watchdog_usec: int = 0) -> None:
        self.address = address
        self.watchdog_interval_s = watchdog_usec / 2e6 if watchdog_usec > 0 else None
        self.errors = 0
        self.sent = 0
        self._next_ping = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Notifier":
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        usec = 0
        pid = env.get("WATCHDOG_PID")
        if pid in (None, "", str(os.getpid())):
            try:
                usec = int(env.get("WATCHDOG_USEC") or 0)
            except ValueError:
                usec = 0
        return cls(address, watchdog_usec=usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """Send ``KEY=value`` lines in one datagram; True when it was delivered."""
        if self.address is None:
            return False
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(addr)
                s.sendall("\n".join(fields).encode())
        except OSError:
            self.errors += 1
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "ready") -> bool:
        return self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def tick(self, now: float) -> bool:
        """Ping the watchdog if one is set and half its period has passed."""
        if self.watchdog_interval_s is None or now < self._next_ping:
            return False
        self._next_ping = now + self.watchdog_interval_s
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str = "stopping") -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")
