"""URLs cut to their host before any text that may hold one is logged, stored or shown.

A sink's URL is a secret (a Slack hook, a webhook's token path): an error's text that
names it goes to the log, ``alerts ls`` and ``/api/alerts/dead`` only through
``redact_url``. Both the sinks' config checks (``base.py``) and the retry policy's
descriptions of failed attempts (``retry.py``) use it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*)://[^\s\"'<>]+")


def redact_url(text: str) -> str:
    """Every URL in ``text`` cut to scheme, host and port: no user, path or query."""
    return _URL.sub(lambda m: _host_only(m.group(0)), text)


def _host_only(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if _port(parts) else ""
    rest = "/..." if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{host}{port}{rest}"


def _port(parts) -> int | None:
    try:
        return parts.port
    except ValueError:
        return None
