"""Slack incoming-webhook sink: ``text`` fallback plus Block Kit blocks.

One message may carry a burst of alerts (the delivery worker coalesces whatever is
due while the 1 message/s rate limit holds it back). Slack's answers:
200 ``ok`` is success; 404 / 410 / ``no_service`` (and the other "this webhook is
gone" bodies) disable the sink: its alerts are dead-lettered and an ERROR says which
sink and why; 429 carries ``Retry-After``; 400 ``invalid_payload`` is permanent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from wtwin.detect.alert import Alert
from wtwin.detect.errors import positive, require
from .base import HttpClient, SinkBase, SinkConfig, check_url, raise_for_status, run_link
from .errors import SinkError
from .secrets import check_ref, resolve

MAX_BATCH_LIMIT = 24  # 2 blocks per alert + header stays under Slack's 50 blocks
GONE_BODIES = frozenset({"no_service", "no_team", "team_disabled", "channel_is_archived", "invalid_token"})
_EMOJI = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}


@dataclass(frozen=True, kw_only=True)
class SlackConfig(SinkConfig):
    """``[[sinks]] type = "slack"``; the webhook URL is a secret, by reference only."""

    type: str = field(default="slack", init=False)
    url_env: str | None = None
    url_file: str | None = None
    link_base_url: str | None = None
    timeout_s: float = 10.0
    min_interval_s: float = 1.0
    linger_s: float = 0.1
    max_batch: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ref("url", self.url_env, self.url_file, required=True)
        if self.link_base_url is not None:
            check_url("link_base_url", self.link_base_url)
        positive("timeout_s", self.timeout_s)
        require(self.max_batch <= MAX_BATCH_LIMIT, f"max_batch must be <= {MAX_BATCH_LIMIT}, got {self.max_batch}")


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _title(a: Alert) -> str:
    state = "RESOLVED" if a.status == "resolved" else "FIRING"
    return f"[{state}] {a.kind} ({a.severity}) on run {a.run}"


def fallback_line(a: Alert, link: str | None) -> str:
    """The plain-text line for one alert (notifications, clients without blocks)."""
    line = (
        f"{_title(a)} at step {a.step}: loss {_num(a.loss, '.4g')} vs forecast "
        f"{_num(a.forecast, '.4g')}, W={_num(a.W, '.2f')}"
    )
    if a.message:
        line += f" - {a.message}"
    return f"{line} {link}" if link else line


def _alert_blocks(a: Alert, link: str | None) -> list[dict[str, Any]]:
    emoji = ":white_check_mark:" if a.status == "resolved" else _EMOJI[a.severity]
    run = f"<{link}|{_esc(a.run)}>" if link else f"`{_esc(a.run)}`"
    headline = f"{emoji} *{'Resolved' if a.status == 'resolved' else 'Firing'}*: {a.kind} on {run}"
    if a.message:
        headline += f"\n{_esc(a.message)}"
    fields = [
        ("Run", _esc(a.run)),
        ("Kind", a.kind),
        ("Severity", a.severity),
        ("Step", str(a.step)),
        ("Loss vs forecast", f"{_num(a.loss, '.4g')} vs {_num(a.forecast, '.4g')}"),
        ("W", _num(a.W, ".2f")),
    ]
    section = {
        "type": "section",
        "text": {"type": "mrkdwn", "text": headline},
        "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in fields],
    }
    if a.details:       # the statistics behind the sentence: small print, not the headline
        stats = {"type": "context", "elements": [{"type": "mrkdwn", "text": _esc(a.details)}]}
        return [section, stats, {"type": "divider"}]
    return [section, {"type": "divider"}]


def render(alerts: Sequence[Alert], link_base_url: str | None = None) -> dict[str, Any]:
    """The exact JSON body posted for a batch of alerts."""
    links = [run_link(link_base_url, a.run) for a in alerts]
    if len(alerts) == 1:
        header, text = _title(alerts[0]), fallback_line(alerts[0], links[0])
    else:
        firing = sum(a.status == "firing" for a in alerts)
        header = f"{len(alerts)} wtwin alerts ({firing} firing, {len(alerts) - firing} resolved)"
        text = header + "\n" + "\n".join(fallback_line(a, l) for a, l in zip(alerts, links))
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": header[:150]}}]
    for a, link in zip(alerts, links):
        blocks.extend(_alert_blocks(a, link))
    return {"text": text, "blocks": blocks[:-1]}


class SlackSink(SinkBase):
    """Posts to one incoming webhook; never retries (the delivery worker does)."""

    def __init__(self, config: SlackConfig, url: str) -> None:
        super().__init__(config)
        self._url = url
        self._http = HttpClient(config.timeout_s)

    @classmethod
    def build(cls, config: SlackConfig, env: Mapping[str, str]) -> "SlackSink":
        url = resolve(f"sinks.{config.name}.url", config.url_env, config.url_file, env)
        check_url(f"sinks.{config.name}.url (resolved)", url)
        return cls(config, url)

    async def send(self, alerts: Sequence[Alert]) -> None:
        body = json.dumps(render(alerts, self.config.link_base_url)).encode()
        status, text, retry_after = await self._http.post(
            self._url, body, {"Content-Type": "application/json; charset=utf-8"}
        )
        answer = text.strip()
        if status in (404, 410) or answer in GONE_BODIES:
            raise SinkError(
                f"slack sink {self.name!r}: the webhook is gone (HTTP {status} {answer!r}): the app or "
                "channel was removed, archived or the URL revoked; fix url_env/url_file and redeliver",
                status=status,
                body=answer,
                disable=True,
            )
        raise_for_status(f"slack sink {self.name!r}", status, answer, retry_after)

    async def healthcheck(self) -> bool:
        """Slack has no side-effect-free probe for a webhook: the URL is well-formed."""
        return self._url.startswith(("http://", "https://"))

    async def aclose(self) -> None:
        await self._http.aclose()
