"""The run pages' HTML: one shell (``static/shell.html``) around each page's ``<main>``."""

from __future__ import annotations

import pytest

from wtwin.daemon.web.pages import PAGES, render


class TestPages:
    @pytest.mark.parametrize("name", sorted(PAGES))
    def test_each_page_is_one_whole_document_with_its_script(self, name):
        """The shell's head and header appear once, the page's own main and script once."""
        html = render(name).decode()
        assert html.startswith("<!doctype html>") and html.endswith("</html>\n")
        for part in ("<header>", "<main>", "</main>", f'<script src="/static/{name}.js"></script>'):
            assert html.count(part) == 1, part
        assert "%" not in html.split("<main>")[0], "a shell marker was left unfilled"
        assert f"<title>wtwind · {PAGES[name].title}</title>" in html

    def test_only_the_plotting_pages_load_uplot_and_the_active_link_is_marked(self):
        """The runs list has no chart library and marks Runs; the analysis page marks its own."""
        index, analyze = render("index").decode(), render("analyze").decode()
        assert "uPlot" not in index and "uPlot.iife.min.js" in analyze
        assert '<a href="/" class="active">Runs</a>' in index
        assert '<a href="/analyze" class="active">Analyze a log</a>' in analyze
        assert 'id="conn"' in index and 'id="conn"' not in analyze
