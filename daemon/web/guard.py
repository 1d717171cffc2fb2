"""Who may talk to the HTTP port: the Host check and state-changing requests.

- **Host.** A request whose ``Host`` is not this daemon's is refused (421), which stops DNS
  rebinding (a page on ``evil.example`` that resolves to 127.0.0.1 sends ``Host:
  evil.example``). Allowed: ``localhost``, ``127.0.0.1`` and ``[::1]`` when bound to
  loopback, the bound address itself, and ``[http] allowed_hosts`` (names, with or
  without a port). Bound to a wildcard (``0.0.0.0``) with no ``allowed_hosts``, Host is
  not checked (Prometheus scrapes by address) and the daemon says so at startup.
- **State-changing requests** (``POST`` and friends: ``/api/alerts/redeliver``,
  ``/api/analyze``). With ``[http] token_env``/``token_file`` set they need
  ``Authorization: Bearer <token>``; without, a request from another site's page is
  refused: an ``Origin`` that is not this Host, or ``Sec-Fetch-Site: cross-site``.

Every refusal is counted in ``wtwind_http_refused_total{reason}``.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

import structlog
from aiohttp import web

log = structlog.get_logger("wtwind.web")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_WILDCARD = ("0.0.0.0", "::", "")
_SAFE = ("GET", "HEAD", "OPTIONS")


def _names(cfg) -> set[str] | None:
    names = {h.lower() for h in cfg.allowed_hosts}
    if cfg.host in _WILDCARD:
        return names or None
    names.add(cfg.host.lower())
    if cfg.host in _LOOPBACK:
        names.update(_LOOPBACK)
    return names


def host_ok(host: str, names: set[str], port: int | None) -> bool:
    host = host.lower()
    if host in names:
        return True
    name, sep, p = host.rpartition(":")
    if not sep or not p.isdigit():
        return False
    name = name.strip("[]")
    return (name in names and (port is None or int(p) == port)) or host in names


def guard(server, cfg, token: str | None):
    names = _names(cfg)
    refused = server.stats.http_refused
    if names is None:
        log.warning("http_host_unchecked", host=cfg.host,
                    hint="bound to all interfaces with no [http] allowed_hosts: Host is not checked")

    @web.middleware
    async def middleware(request: web.Request, handler):
        if names is not None and not host_ok(request.host or "", names, server.http_port):
            refused["host"] += 1
            return web.json_response({"error": "unknown Host; add it to [http] allowed_hosts"}, status=421)
        if request.method not in _SAFE:
            why = _refuse_write(request, token)
            if why is not None:
                refused[why[0]] += 1
                return web.json_response({"error": why[1]}, status=401 if why[0] == "token" else 403)
        return await handler(request)

    return middleware


def _refuse_write(request: web.Request, token: str | None) -> tuple[str, str] | None:
    if token is not None:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return "token", "this endpoint needs Authorization: Bearer <[http] token>"
        return None
    origin = request.headers.get("Origin")
    if origin and urlsplit(origin).netloc.lower() != (request.host or "").lower():
        return "origin", "requests from other sites' pages are refused"
    if request.headers.get("Sec-Fetch-Site") == "cross-site":
        return "origin", "requests from other sites' pages are refused"
    return None
