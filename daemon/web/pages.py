"""The HTML of the run pages: one shell (``static/shell.html``: head, header, scripts)
around each page's ``<main>`` (``static/<page>.html``).

A page names its title, whether it plots (uPlot's CSS and script), which nav link is
active, whether it shows the connection indicator, and its links. Read from disk on
each request, as the static files are, so an edit shows at the next reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
LINKS = (("/", "Runs"), ("/analyze", "Analyze a log"))


@dataclass(frozen=True, kw_only=True)
class Page:
    title: str
    plot: bool = True
    active: str | None = None
    conn: bool = True
    links: tuple[tuple[str, str], ...] = LINKS


PAGES = {
    "index": Page(title="runs", plot=False, active="/", links=LINKS + (("/metrics", "/metrics"),)),
    "run": Page(title="run"),
    "analyze": Page(title="analyze a log", active="/analyze", conn=False),
    "compare": Page(title="compare"),
}


def render(name: str) -> bytes:
    """The whole HTML document of page ``name`` (a key of ``PAGES``)."""
    page = PAGES[name]
    nav = "".join(f'<a href="{href}" class="active">{text}</a>' if href == page.active
                  else f'<a href="{href}">{text}</a>' for href, text in page.links)
    parts = {
        "%TITLE%": page.title,
        "%PLOT_CSS%": '<link rel="stylesheet" href="/static/uPlot.min.css">\n' if page.plot else "",
        "%NAV%": nav,
        "%CONN%": '  <span id="conn" class="conn">connecting…</span>\n' if page.conn else "",
        "%PLOT_JS%": '<script src="/static/uPlot.iife.min.js"></script>\n' if page.plot else "",
        "%PAGE%": name,
    }
    html = (STATIC / "shell.html").read_text(encoding="utf-8")
    for marker, value in parts.items():
        html = html.replace(marker, value)
    return html.replace("%MAIN%", (STATIC / f"{name}.html").read_text(encoding="utf-8")).encode()
