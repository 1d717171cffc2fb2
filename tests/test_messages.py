"""The words of a page (detect/messages.py, issue 37 item 8): one sentence of what happened,
its size in the loss's units and in % of the run's progress, since which step, and the
first thing to check with a runbook that exists; the statistics in ``details``."""

from __future__ import annotations

import json
import math
import pathlib
import random
import re
import subprocess
import sys

from helpers import REPO

from wtwin.detect import RunMonitor
from wtwin.detect.messages import CHECKS, RUNBOOKS

STATISTICS = ("CUSUM", "noise units", "level score", "W=", " z ", "band ")
URL = re.compile(r"https://\S+?\.md")


def pages(losses, mon=None, evals=None):
    """The active findings of a run, as (step, kind, severity, message, details)."""
    mon = mon or RunMonitor()
    out = []
    for t, x in enumerate(losses, 1):
        st = mon.update_loss(t, x)
        if evals and t % 250 == 0:
            st = st._replace(findings=st.findings + mon.update_eval(t, {"val_loss": evals(t)}).findings)
        out += [(f.step, f.kind, f.severity, f.message, f.details) for f in st.findings if f.active]
    return out


def law(t: int, rng: random.Random) -> float:
    return 2.5 + 9.0 * t ** -0.35 + rng.gauss(0, 0.05)


def drift_run():
    rng = random.Random(0)
    return [law(t, rng) + max(0.0, t - 5000) * 1e-4 for t in range(1, 8001)]


def first_page(found, kind):
    return next(p for p in found if p[1] == kind and p[2] != "info")


def assert_readable(head: str, kind: str) -> None:
    """A page's sentence: no statistics, a check and a runbook of the shipped docs."""
    for word in STATISTICS:
        assert word not in head, (word, head)
    assert "; first check " in head, head
    urls = URL.findall(head)
    assert urls and urls[-1].startswith(RUNBOOKS), head
    book = REPO / "docs" / "runbooks" / urls[-1][len(RUNBOOKS):]
    assert book.is_file(), book


class TestHeadline:
    def test_a_drift_says_how_much_since_when_and_what_to_check(self):
        """A ramp from step 5000: the page says the rise in loss units and in % of the
        run's progress, the step it began, and the check; W and the band are details."""
        step, kind, sev, head, details = first_page(pages(drift_run()), "drift")
        assert sev == "warning" and 5000 < step < 7000
        assert re.search(r"up \d\.\d+ \(\d+(\.\d)?% of the run's progress\)", head), head
        since = int(re.search(r"since step (\d+)", head).group(1))
        assert 5000 < since <= step, head
        assert_readable(head, kind)
        assert "W=" in details or "CUSUM" in details, details

    def test_a_nan_pages_with_the_step_and_the_nonfinite_runbook(self):
        rng = random.Random(1)
        losses = [law(t, rng) if t != 3000 else math.nan for t in range(1, 3002)]
        step, kind, sev, head, _ = first_page(pages(losses), "nonfinite")
        assert (step, sev) == (3000, "critical") and "at step 3000" in head, head
        assert_readable(head, kind)
        assert "WTwinLossNonFinite.md" in head

    def test_a_blow_up_is_critical_and_says_its_share_of_progress(self):
        rng = random.Random(2)
        losses = [law(t, rng) * (1 if t < 4000 else 1 + (t - 4000) * 0.01) for t in range(1, 5001)]
        step, kind, sev, head, details = first_page(pages(losses), "divergence")
        assert sev == "critical" and "ran away from its best" in head, head
        assert "of the run's progress" in head and "since step" in head, head
        assert_readable(head, kind)
        assert details.startswith("level "), details

    def test_info_findings_carry_no_check(self):
        """Only pages end with a check: an info (a benign spike) is one plain sentence."""
        rng = random.Random(3)
        losses = [law(t, rng) * (1.6 if t == 3000 else 1.0) for t in range(1, 3500)]
        infos = [p for p in pages(losses) if p[2] == "info" and p[1] == "spike"]
        assert infos and all("first check" not in p[3] for p in infos), infos

    def test_every_kind_with_a_check_has_its_runbook(self):
        for kind, (what, book) in CHECKS.items():
            assert what and (REPO / "docs" / "runbooks" / f"{book}.md").is_file(), kind


class TestOffline:
    def test_monitor_json_carries_the_details_and_the_text_only_the_sentence(self, tmp_path):
        """``wtwin monitor --json`` has ``details`` beside ``message``; the table prints
        the sentence alone."""
        log = tmp_path / "ramp.csv"
        log.write_text("step,loss\n" + "".join(f"{t},{x}\n" for t, x in enumerate(drift_run(), 1)))
        cli = [sys.executable, "-m", "wtwin.offline.cli", "monitor", str(log)]
        out = json.loads(subprocess.run(cli + ["--json"], capture_output=True, text=True,
                                        check=False).stdout)
        drift = next(a for a in out["alerts"] if a["kind"] == "drift")
        assert drift["details"] and "first check" in drift["message"]
        text = subprocess.run(cli, capture_output=True, text=True, check=False).stdout
        assert drift["message"] in text and drift["details"] not in text


def test_runbook_names_are_the_sinks_alertnames_or_documented():
    """The runbook a page links is the alert name the webhook sends for its kind."""
    from wtwin.sinks.webhook import ALERTNAMES

    for kind, (_, book) in CHECKS.items():
        assert ALERTNAMES[kind] == book, (kind, book)
    assert pathlib.Path(REPO / "docs" / "runbooks" / "WTwinResumeJump.md").is_file()
