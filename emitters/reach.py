"""Whether wtwind answers: one warning in the trainer's log when nothing has been acked
for ``warn_after_s`` while events wait for an ack, and one line when acks come back.
When the daemon refuses events (an ``error`` reply), the reason is said once per reason,
in words, and the later "never acked" lines name it instead of asking whether wtwind runs.

Plain stdlib ``logging`` (logger ``wtwin.emitters``): with no logging configured,
Python prints warnings to stderr; a trainer that configures logging gets them in its
own log. Owned by the emitter's I/O thread; the caller's thread only reads the fields.
"""

from __future__ import annotations

import logging

log = logging.getLogger("wtwin.emitters")


class Reach:
    def __init__(self, endpoint: str, warn_after_s: float) -> None:
        if not warn_after_s > 0:
            raise ValueError("warn_unacked_s must be > 0 seconds")
        self.endpoint = endpoint
        self.warn_after_s = warn_after_s
        self.waiting_since: float | None = None  # monotonic: oldest wait for an ack not answered
        self.unreachable = False
        self.warnings = 0
        self.refusal: str | None = None  # the last refusal, in words
        self._said: set = set()          # reasons already logged

    def refused(self, msg: dict, secret_at: str) -> None:
        """The daemon refused events: say why once per reason, and what to do."""
        reason = str(msg.get("reason"))[:40]
        self.refusal = explain(msg, secret_at)
        if reason not in self._said and len(self._said) < 16:
            self._said.add(reason)
            self.warnings += 1
            log.warning("wtwin: wtwind at %s refused events: %s", self.endpoint, self.refusal)

    def _cause(self) -> str:
        if self.refusal is not None:
            return "wtwind refused them (the reason is logged above)"
        return "is wtwind running and listening there?"

    def sent(self, now: float) -> None:
        """Events went out: from now on an answer is due."""
        if self.waiting_since is None:
            self.waiting_since = now

    def heard(self, now: float, all_acked: bool) -> None:
        """An ack from the daemon: it is there; the wait starts over if events remain."""
        if self.unreachable:
            self.unreachable = False
            log.warning("wtwin: wtwind at %s acks again after %.0f s of silence",
                        self.endpoint, now - (self.waiting_since or now))
        self.waiting_since = None if all_acked else now

    def check(self, now: float, waiting: int) -> None:
        """Called on each turn of the I/O loop; warns once per silence."""
        if self.unreachable or self.waiting_since is None:
            return
        if now - self.waiting_since >= self.warn_after_s:
            self.unreachable = True
            self.warnings += 1
            log.warning("wtwin: nothing acked by wtwind at %s for %.0f s (%d events waiting); "
                        "%s Events are held and re-sent when it answers (up to resend_size)",
                        self.endpoint, now - self.waiting_since, waiting, self._cause())

    def closing(self, now: float, waiting: int) -> None:
        """At close: a short run that never heard back still gets its one line."""
        if waiting and self.waiting_since is not None and not self.unreachable:
            self.warnings += 1
            log.warning("wtwin: closing with %d events never acked by wtwind at %s "
                        "(waited %.1f s); %s",
                        waiting, self.endpoint, now - self.waiting_since, self._cause())

    def silent_s(self, now: float) -> float:
        return 0.0 if self.waiting_since is None else now - self.waiting_since


def explain(msg: dict, secret_at: str) -> str:
    """An ``error`` reply in words, with what the trainer can do about it."""
    run = str(msg.get("run", "?"))[:200]
    detail = str(msg.get("message", ""))[:200]
    words = {
        "not_owner": f"run {run!r} belongs to another client; use a new run name, "
                     f"or the run's secret at {secret_at}",
        "run_table_full": f"run {run!r} not started: wtwind holds its maximum of runs "
                          f"([runs] max_runs; {detail})",
        "client_run_quota": f"run {run!r} not started: this client holds its quota of live "
                            f"runs ([runs] max_runs_per_client; {detail})",
        "emitter_quota": f"run {run!r} has too many live trainer processes "
                         f"([runs] max_emitters_per_run; {detail})",
        "config_quota": f"run {run!r}: its config is too large ([runs] max_config_bytes; {detail})",
        "quarantined": f"wtwind cannot persist run {run!r}; see its log ({detail})",
    }
    return words.get(msg.get("reason"), f"run {run!r}: {str(msg.get('reason'))[:40]} ({detail})")
