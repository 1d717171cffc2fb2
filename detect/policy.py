"""Turn detector findings into alert transitions: firing -> resolved, per (run, kind).

Pure: the caller passes ``now`` (Unix seconds). A kind fires on its first active
finding, stays deduplicated while active (a higher severity upgrades it), and resolves
once it has stayed inactive for ``resolve_after_steps`` training steps (like
Alertmanager's ``keep_firing_for``: a score hovering at its threshold does not flap).
Detectors report a kind only when it changes, so a held resolve or firing comes due
through ``advance(step)``, which the caller runs on a loss event whenever the policy is
not ``idle`` (``replay.observe_loss``: an idle policy and no findings skip it).
Kinds in ``immediate_kinds`` (``stalled``: its step does not advance) resolve at once.

A cooldown delays a page while its condition holds: a firing of a kind within
``cooldown_s`` of its last resolve is held (``pending``) and fires as soon as the
cooldown has passed (at the next ``apply`` or ``advance``) or the run ends, whichever
comes first; an escalation (a severity above the one that resolved) fires at once.
``delayed`` counts the firings held back; ``withdrawn`` those whose condition ended
while held (a kind resolves only once its loss recovered, `detect/recovery.py`: an
episode that begins and recovers inside the cooldown is not sent). Detectors report a
kind only when it changes: a firing held by the cooldown is kept until it is sent or
withdrawn, and one whose condition went quiet is not sent at run end.

This is the only deduplication and cooldown on an alert's path: the router
(``sinks/routing.py``) only matches and holds, so what the policy emits is what is
committed and sent.

Resolved means recovered: ``resolve_all`` (the run ended) resolves only the kinds whose
resolve is already held for its quiet streak (their condition ended); what still fires
when the run ends stays firing, whatever its severity: a run that ends while failing
has not recovered.
"""

from __future__ import annotations

from .alert import SEVERITIES, Alert

from .finding import Finding

_RANK = {s: i for i, s in enumerate(SEVERITIES)}


class AlertPolicy:
    def __init__(self, run: str, *, cooldown_s: float = 60.0, resolve_after_steps: int = 100,
                 immediate_kinds: tuple[str, ...] = ("stalled",)) -> None:
        if cooldown_s < 0:
            raise ValueError(f"cooldown_s must be >= 0, got {cooldown_s!r}")
        if resolve_after_steps < 0:
            raise ValueError(f"resolve_after_steps must be >= 0, got {resolve_after_steps!r}")
        self.run = run
        self.cooldown_s = cooldown_s
        self.resolve_after_steps = resolve_after_steps
        self.immediate_kinds = tuple(immediate_kinds)
        self._firing: dict[str, Alert] = {}
        self._resolved_at: dict[str, float] = {}
        self._quiet_since: dict[str, int] = {}   # kind -> first step of the inactive streak
        self._quiet_msg: dict[str, str] = {}
        self._resolved_sev: dict[str, str] = {}
        self._pending: dict[str, dict] = {}      # kind -> a firing held by the cooldown
        self.delayed = 0                         # firings held back by the cooldown
        self.withdrawn = 0                       # of them, ended before it passed: not sent

    @property
    def firing(self) -> dict[str, Alert]:
        return self._firing

    @property
    def idle(self) -> bool:
        """Nothing held: no resolve waiting for its quiet streak, no firing held by a
        cooldown. Then ``advance`` returns [] and changes nothing, so an update without
        findings may skip the policy (`replay.observe_loss`, `replay.scan`: every event)."""
        return not (self._quiet_since or self._pending)

    def apply(self, finding: Finding, now: float, *, loss=None, forecast=None, W=None,
              force: bool = False) -> Alert | None:
        """Return the transition this finding causes, or None."""
        current = self._firing.get(finding.kind)
        if finding.active:
            self._quiet_since.pop(finding.kind, None)
            self._quiet_msg.pop(finding.kind, None)
            if current is not None:
                if _RANK[finding.severity] <= _RANK[current.severity]:
                    return None
            elif self._cooling(finding, now):
                if finding.kind not in self._pending:
                    self.delayed += 1
                self._pending[finding.kind] = {"finding": list(finding), "loss": _f(loss),
                                               "forecast": _f(forecast), "W": _f(W)}
                return None
            self._pending.pop(finding.kind, None)
            return self._fire(finding, now, current, loss, forecast, W)
        if current is None:
            if self._pending.pop(finding.kind, None) is not None:
                self.withdrawn += 1              # recovered inside the cooldown: not sent
            return None
        if not force and finding.kind not in self.immediate_kinds and self.resolve_after_steps:
            self._quiet_since.setdefault(finding.kind, finding.step)
            self._quiet_msg[finding.kind] = finding.message
            return self._due(finding.kind, finding.step, now, loss, forecast, W)
        return self._resolve(finding.kind, finding.step, now, finding.message, loss, forecast, W)

    def _cooling(self, finding: Finding, now: float) -> bool:
        """Within the cooldown of the kind's last resolve, and no escalation over it."""
        if now - self._resolved_at.get(finding.kind, -1e18) >= self.cooldown_s:
            return False
        return _RANK[finding.severity] <= _RANK[self._resolved_sev.get(finding.kind, "critical")]

    def _fire(self, finding, now, current, loss, forecast, W) -> Alert:
        alert = Alert(run=self.run, kind=finding.kind, severity=finding.severity,
                      status="firing", step=finding.step,
                      started_at=current.started_at if current else now,
                      message=finding.message, details=finding.details, loss=_f(loss),
                      forecast=_f(forecast), W=_f(W))
        self._firing[finding.kind] = alert
        return alert

    def _release(self, now: float, ended: bool = False) -> list[Alert]:
        """Fire the held firings whose cooldown has passed (``ended``: all of them)."""
        out = []
        for kind in [k for k in self._pending
                     if ended or now - self._resolved_at.get(k, -1e18) >= self.cooldown_s]:
            p = self._pending.pop(kind)
            out.append(self._fire(Finding(*p["finding"]), now, None, p["loss"], p["forecast"], p["W"]))
        return out

    def advance(self, step: int, now: float, *, loss=None, forecast=None, W=None) -> list[Alert]:
        """Resolve the held kinds whose quiet streak has lasted long enough by ``step``, and
        fire the firings held by a cooldown that has passed."""
        out = self._release(now) if self._pending else []
        if not self._quiet_since:
            return out
        return out + [a for kind in list(self._quiet_since)
                      if (a := self._due(kind, step, now, loss, forecast, W)) is not None]

    def _due(self, kind, step, now, loss, forecast, W) -> Alert | None:
        if step - self._quiet_since[kind] < self.resolve_after_steps:
            return None
        return self._resolve(kind, step, now, self._quiet_msg.get(kind, ""), loss, forecast, W)

    def _resolve(self, kind, step, now, message, loss, forecast, W) -> Alert:
        current = self._firing.pop(kind)
        self._quiet_since.pop(kind, None)
        self._quiet_msg.pop(kind, None)
        self._resolved_at[kind] = now
        self._resolved_sev[kind] = current.severity
        return Alert(run=self.run, kind=current.kind, severity=current.severity,
                     status="resolved", step=step, started_at=current.started_at,
                     ended_at=now, message=message or current.message, details=current.details,
                     loss=_f(loss), forecast=_f(forecast), W=_f(W))

    def resolve_all(self, step: int, now: float, message: str) -> list[Alert]:
        """The run ended: a firing held by a cooldown fires now (its condition still holds,
        else it was withdrawn) and stays firing; the kinds whose resolve is held for
        its quiet streak resolve, and so do ``immediate_kinds`` (a run that ended is not
        stalled); the others stay firing (a run that ends while failing has not recovered)."""
        out = self._release(now, ended=True) if self._pending else []
        return out + [self._resolve(kind, step, now, self._quiet_msg.get(kind) or message,
                                    None, None, None)
                      for kind in list(self._firing)
                      if kind in self._quiet_since or kind in self.immediate_kinds]

    def snapshot(self) -> dict:
        return {"firing": {k: a.to_dict() for k, a in self._firing.items()},
                "resolved_at": dict(self._resolved_at), "quiet_since": dict(self._quiet_since),
                "quiet_msg": dict(self._quiet_msg), "resolved_sev": dict(self._resolved_sev),
                "pending": {k: dict(v, finding=list(v["finding"])) for k, v in self._pending.items()},
                "delayed": self.delayed, "withdrawn": self.withdrawn}

    def restore(self, snap: dict) -> None:
        self._firing = {k: Alert.from_dict(d) for k, d in snap["firing"].items()}
        self._resolved_at = dict(snap["resolved_at"])
        self._quiet_since = dict(snap.get("quiet_since", {}))
        self._quiet_msg = dict(snap.get("quiet_msg", {}))
        self._resolved_sev = dict(snap.get("resolved_sev", {}))
        self._pending = {k: dict(v, finding=list(v["finding"])) for k, v in snap.get("pending", {}).items()}
        self.delayed = int(snap.get("delayed", 0))
        self.withdrawn = int(snap.get("withdrawn", 0))


def _f(x):
    return None if x is None else float(x)
