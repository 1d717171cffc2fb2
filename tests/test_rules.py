"""The shipped Prometheus rules and Alertmanager config: promtool/amtool checks and unit tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy/prometheus/wtwin.rules.yml"
RULE_TESTS = sorted((ROOT / "deploy/prometheus/tests").glob("*.yml"))
REQUIRED = {"WTwinLossDegradation", "WTwinLossNonFinite", "WTwinLossSpike", "WTwinRunStalled",
            "WTwinSpectralOutOfBand", "WTwinAlertDeliveryFailing", "WTwindDown"}


def exported_metrics() -> set[str]:
    """Metric names the code renders (daemon/, sinks/), with the client's _total/_info suffixes."""
    names: set[str] = set()
    for folder in ("daemon", "sinks"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"[\"'](wtwind_[a-z_]+)[\"']", path.read_text()))
    return names | {n + "_total" for n in names} | {n + "_info" for n in names}


def binary(name: str) -> str:
    """Path of a Debian binary; skip when absent unless CI=true (then fail)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is required in CI (apt-get install prometheus prometheus-alertmanager)")
        pytest.skip(f"{name} not installed (Debian package prometheus / prometheus-alertmanager)")
    return path


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


@pytest.mark.binary
class TestPromtool:
    def test_check_rules(self):
        """promtool check rules accepts the file."""
        out = subprocess.run([binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"SUCCESS: {len(rules())} rules found" in out.stdout

    def test_unit_tests(self):
        """promtool test rules: every shipped unit test passes."""
        assert RULE_TESTS
        out = subprocess.run([binary("promtool"), "test", "rules", *map(str, RULE_TESTS)],
                             capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0, out.stdout + out.stderr

    def test_check_scrape_config(self):
        """promtool check config accepts the shipped prometheus.yml (and the rules it loads)."""
        out = subprocess.run([binary("promtool"), "check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr

    def test_alertmanager_config(self):
        """amtool check-config accepts the example alertmanager.yml."""
        out = subprocess.run([binary("amtool"), "check-config", str(ROOT / "deploy/alertmanager/alertmanager.yml")],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


class TestRuleConventions:
    def test_required_alerts_present(self):
        """The alerts the docs promise are all shipped."""
        assert REQUIRED <= {r["alert"] for r in rules()}

    @pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
    def test_rule_shape(self, rule):
        """Every rule has for:, a severity label and summary/description/runbook_url."""
        assert "for" in rule
        sev = rule["labels"]["severity"]
        assert sev in ("info", "warning", "critical") or set(re.findall(r"\b(info|warning|critical)\b", sev)), sev
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])

    @pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
    def test_runbook_exists(self, rule):
        """runbook_url points at docs/runbooks/<AlertName>.md, and that file exists."""
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"/docs/runbooks/{rule['alert']}.md")
        assert (ROOT / "docs/runbooks" / f"{rule['alert']}.md").is_file()

    @pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
    def test_only_exported_metrics(self, rule):
        """Rules (and their annotation queries) use only metrics wtwind exports."""
        text = rule["expr"] + " ".join(rule["annotations"].values())
        used = set(re.findall(r"\b(wtwind_[a-z_]+)", text))
        assert used or rule["alert"] == "WTwindDown"  # that one reads Prometheus's own `up`
        assert used <= exported_metrics(), used - exported_metrics()

    def test_spike_takes_the_daemons_severity_and_never_pages(self):
        """The spike rule's severity is the daemon's (warning, or critical from 3): the rule
        reads wtwind_run_alert_severity and never carries info (promtool tests both values)."""
        (spike,) = [r for r in rules() if r["alert"] == "WTwinLossSpike"]
        assert "wtwind_run_alert_severity" in spike["expr"]
        sev = spike["labels"]["severity"]
        assert "warning" in sev and "info" not in sev

    @pytest.mark.parametrize("rule", [r for r in rules() if "wtwind_run_alert" in r["expr"]],
                             ids=lambda r: r["alert"])
    def test_run_rules_fire_on_the_daemons_severity(self, rule):
        """Every rule over the daemon's findings reads their severity, from 2 (warning) up,
        never the bare active flag: an `info` finding pages nobody."""
        expr = rule["expr"]
        assert "wtwind_run_alert_active" not in expr, expr
        for use in re.findall(r"wtwind_run_alert_severity\{[^}]*\}\)\s*(>=?)\s*([0-9.]+)", expr):
            op, bound = use
            assert float(bound) >= (2 if op == ">=" else 1), expr
        assert re.search(r"wtwind_run_alert_severity\{[^}]*\}\)\s*>=?\s*[0-9.]+", expr), expr
        assert "info" not in str(rule["labels"]["severity"])

    def test_header_names_the_for_0s_rules(self):
        """The rules file's header lists exactly the rules that fire without waiting."""
        line = next(ln for ln in RULES.read_text().splitlines() if ln.startswith("# for-0s:"))
        named = {n.strip() for n in line.split(":", 1)[1].split(",")}
        assert named == {r["alert"] for r in rules() if r["for"] in ("0s", "0m", "0")}
        header = RULES.read_text().split("groups:")[0]
        assert "so a single scrape never pages" not in header  # no longer claimed for all

    @pytest.mark.parametrize("alertname", ["WTwindDown", "WTwinAlertDeliveryFailing"])
    def test_daemon_alerts_reach_their_own_route(self, alertname):
        """amtool: the daemon's own alerts reach the route that groups them by instance,
        not shadowed by the severity routes before it."""
        am = ROOT / "deploy/alertmanager/alertmanager.yml"
        out = subprocess.run([binary("amtool"), "config", "routes", "test", "--config.file", str(am),
                              "--tree", f"alertname={alertname}", "severity=critical"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert 'alertname=~"WTwindDown|WTwinAlertDeliveryFailing"' in out.stdout, out.stdout
