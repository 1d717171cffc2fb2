"""Who may write to which run, and how much of the daemon one client may take.

**Runs belong to a principal.** The first event of a run binds it to the principal that
sent it: the CURVE client key when CURVE is on, else the hash of the run's secret
(``auth``, emitters/run_secret.py), else ``anonymous``. From then on an event, a
``run_end`` or a checkpoint from any other principal is refused (an ``error`` reply with
reason ``not_owner``, ``wtwind_events_dropped_total{reason="not_owner"}``, a
rate-limited WARNING), and its sender is never registered to receive the run's alerts.
A resumed trainer reads the same secret (or has the same key) and goes on. Runs whose
name matches ``[runs] shared`` take events from every principal. The owner is kept in the
run's snapshot (only the hash of a secret, never the secret) and never shown.

**Quotas.** A new run beyond ``max_runs`` (the whole table) or ``max_runs_per_client``
(live runs created by one client: its CURVE key, or its connection without CURVE) is
refused with ``run_table_full`` / ``client_run_quota``. A run holds at most
``max_emitters_per_run`` emitter ids: a new one first evicts ids silent for
``emitter_idle_s`` (trainer processes that are gone), else it is refused
(``emitter_quota``). A ``run_start`` config over ``max_config_bytes`` is refused
(``config_quota``). Every refusal: an error reply (at most one a second per connection),
a counter by reason, a rate-limited log line.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from fnmatch import fnmatchcase
from typing import Callable

import msgpack
import structlog

from wtwin.emitters import wire

from .logsetup import RateLimited

log = structlog.get_logger("wtwind.admission")
ANONYMOUS = "anonymous"
REPLY_INTERVAL_S = 1.0
_MAX_CACHE = 10_000


def key_principal(user: str) -> str:
    """A CURVE client's principal, and the client its new runs are charged to: its key
    (without CURVE, or without a key, the connection is)."""
    return "key:" + user


class Admission:
    def __init__(self, cfg, table, stats, send: Callable[[bytes, bytes], bool], *,
                 curve: bool, restore: Callable[[object], None] | None = None) -> None:
        """``restore(run)``: fill a run just created with its stored state, if it has one
        (``Restores.fill``)."""
        self.cfg = cfg
        self.restore = restore
        self.table = table
        self.stats = stats
        self.send = send
        self.curve = curve
        self.per_client: Counter = Counter()   # live runs created, by client
        self._hashes: dict[str, str] = {}       # secret -> principal (hashing once per secret)
        self._replied: dict[bytes, float] = {}  # identity -> last error reply (monotonic)
        self._log = RateLimited(log)

    def principal_of(self, auth: str | None, user: str | None) -> str:
        """Who sent an event with this secret (``auth``), over a connection with this
        CURVE key (``user``)."""
        if self.curve:
            return key_principal(user) if user else ANONYMOUS
        if auth is None:
            return ANONYMOUS
        found = self._hashes.get(auth)
        if found is None:
            if len(self._hashes) >= _MAX_CACHE:
                self._hashes.clear()
            found = self._hashes[auth] = "secret:" + hashlib.sha256(auth.encode()).hexdigest()
        return found

    def admit(self, name: str, emitter: str | None, identity: bytes, principal: str, now: float,
              run=None, n: int = 1):
        """The run ``name`` if ``principal`` may send it ``n`` events from ``emitter``, else
        None (refused: replied, counted ``n`` times, logged). Once for a frame's events of
        one run, one emitter and one secret (``daemon/ingest.py``, which passes the ``run``
        it has looked up); ``config_fits`` checks a ``run_start``'s config on top."""
        if run is None:
            run = self.table.get(name)
        if run is None:
            run = self._create(name, identity, principal, now, n)
            if run is None:
                return None
        if run.owner is None:  # a new run, or one stored before runs had owners
            run.claim(principal)
        elif run.owner != principal and not self._shared(run):
            return self._refuse("not_owner", identity, name, "run belongs to another client", n)
        if (emitter is not None and not run.marks.knows(emitter)
                and not self._room_for_emitter(run, now)):
            return self._refuse("emitter_quota", identity, name,
                                f"run has {self.cfg.max_emitters_per_run} live emitter ids", n)
        return run

    def config_fits(self, ev: dict, identity: bytes) -> bool:
        """A ``run_start``'s config is within ``max_config_bytes``, or it is refused."""
        if ev.get("config"):
            size = len(msgpack.packb(ev["config"], use_bin_type=True))
            if size > self.cfg.max_config_bytes:
                self._refuse("config_quota", identity, ev["run"],
                             f"config of {size} bytes over {self.cfg.max_config_bytes}")
                return False
        return True

    def forget(self, run) -> None:
        """A run left memory: its creator may create another."""
        creator = getattr(run, "creator", None)
        if creator is not None:
            self.per_client[creator] -= 1
            if self.per_client[creator] <= 0:
                del self.per_client[creator]

    # ---- internals -------------------------------------------------------------------
    def _create(self, name: str, identity: bytes, principal: str, now: float, n: int):
        client = principal if self.curve and principal != ANONYMOUS else identity
        if not name.isprintable():  # CR/LF and friends: a run no page or log line could show
            return self._refuse("bad_run_name", identity, name,
                                "a run name must be printable text: no control characters such as CR or LF", n)
        if self.per_client[client] >= self.cfg.max_runs_per_client:
            return self._refuse("client_run_quota", identity, name,
                                f"this client already has {self.cfg.max_runs_per_client} live runs", n)
        run = self.table.get_or_create(name, now, creator=client)
        if run is None:
            return self._refuse("run_table_full", identity, name,
                                f"the daemon holds its maximum of {self.cfg.max_runs} runs", n)
        self.per_client[client] += 1
        if self.restore is not None:
            self.restore(run)
        return run

    def _shared(self, run) -> bool:
        return any(fnmatchcase(run.run, pattern) for pattern in self.cfg.shared)

    def _room_for_emitter(self, run, now: float) -> bool:
        """Room for one more emitter id on ``run``. An id holds a place from its first
        admitted event, whether or not its seq ever moved the run's mark (a duplicate or
        a gap still registers where its acks go), so the bound is on every id
        the run knows (``EmitterMarks.known``)."""
        marks, most = run.marks, self.cfg.max_emitters_per_run
        if len(marks.known()) < most:
            return True
        # processes that are gone: their dedup marks no longer matter
        self.stats.evicted_emitters += marks.evict_idle(now, self.cfg.emitter_idle_s)
        return len(marks.known()) < most

    def _refuse(self, reason: str, identity: bytes, run: str, message: str, n: int = 1) -> None:
        self.stats.dropped[reason] += n
        self._log.warning("event_refused", reason, reason=reason, run=run[:200], detail=message)
        now = time.monotonic()
        if now - self._replied.get(identity, -1e18) >= REPLY_INTERVAL_S:
            if len(self._replied) >= _MAX_CACHE:
                self._replied.clear()
            self._replied[identity] = now
            self.send(identity, wire.reply("error", reason=reason, run=run, message=message))
        return None

