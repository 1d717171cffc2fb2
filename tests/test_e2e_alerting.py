"""End to end: emitter -> wtwind -> Prometheus (shipped rules) -> Alertmanager -> webhook receiver.

Real binaries (/usr/bin/prometheus, prometheus-alertmanager), a real wtwind subprocess,
real HTTP receivers. A degrading run must make ``WTwinLossDegradation`` fire in
Prometheus (checked through its HTTP API) and reach a local receiver through
Alertmanager; the same alert reaches a receiver directly from wtwind's own webhook
sink, signed (verified with ``standardwebhooks``). The rules are a test copy of the
shipped file with every ``for:`` shortened to 1 s; intervals are 1 s.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from helpers import REPO, Daemon, free_port, http_get, need_binary, wait_for
from wtwin.emitters import connect
from http_recorder import ThreadedRecorder

SECRET = "whsec_" + base64.b64encode(b"e2e-secret-for-the-wtwind-sink!!").decode()


def short_rules(dst: Path) -> Path:
    text = (REPO / "deploy/prometheus/wtwin.rules.yml").read_text()
    dst.write_text(re.sub(r"(?m)^(\s+)for: \S+$", r"\1for: 1s", text))
    return dst


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def start_alertmanager(am_bin: str, tmp_path: Path, port: int, hook_url: str) -> subprocess.Popen:
    """A real Alertmanager on ``port`` whose one route posts every group (and its
    resolution) to ``hook_url`` within about a second."""
    (tmp_path / "am.yml").write_text(f"""
route:
  receiver: hook
  group_by: [alertname, run]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {hook_url}
        send_resolved: true
""")
    return start([am_bin, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'am-data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], tmp_path / "am.log")


def up(url: str) -> bool:
    try:
        return http_get(url, 1.0)[0] == 200
    except OSError:
        return False


def api(url: str) -> dict:
    status, body = http_get(url)
    assert status == 200, body
    return json.loads(body)


ROUTE_ALL_TO_HOOK = """
[[routes]]
sinks = ["hook"]
"""


@pytest.fixture
def stack(tmp_path, request):
    """wtwind (its webhook sink ``hook`` routed as ``request.param`` says: by default one
    route to it), Prometheus with the shipped rules, Alertmanager, one receiver."""
    routes = getattr(request, "param", ROUTE_ALL_TO_HOOK)
    prom_bin, am_bin = need_binary("prometheus"), need_binary("prometheus-alertmanager")
    recv = ThreadedRecorder()
    am_port, prom_port = free_port(), free_port()
    cfg = tmp_path / "wtwind.toml"
    cfg.write_text(f"""
[[sinks]]
type = "webhook"
name = "hook"
url = "{recv.base}/wtwind"
secret_env = "E2E_HOOK_SECRET"
{routes}
[delivery.retry]
base_s = 0.05
cap_s = 0.5
""")
    daemon = Daemon(extra_env={"E2E_HOOK_SECRET": SECRET}, args=("--config", str(cfg)),
                    tmpdir=str(tmp_path)).start()
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{short_rules(tmp_path / "rules.yml")}]
alerting:
  alertmanagers: [{{static_configs: [{{targets: ["127.0.0.1:{am_port}"]}}]}}]
scrape_configs:
  - job_name: wtwind
    static_configs: [{{targets: ["127.0.0.1:{daemon.http_port}"]}}]
""")
    procs = [
        start_alertmanager(am_bin, tmp_path, am_port, f"{recv.base}/alertmanager"),
        start([prom_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
               f"--storage.tsdb.path={tmp_path / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
              tmp_path / "prom.log"),
    ]
    try:
        yield {"daemon": daemon, "recv": recv, "prom": f"http://127.0.0.1:{prom_port}",
               "am": f"http://127.0.0.1:{am_port}", "tmp": tmp_path}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        daemon.stop()
        recv.close()


def degrade(emit, stop: threading.Event, max_steps: int = 100_000) -> None:
    """A clean power-law curve, then from step 2000 a steady upward drift, until stopped.

    The first 3,000 steps go out at once; after that ~200 steps/s keep the drift going
    while Prometheus scrapes and evaluates.
    """
    for step in range(1, max_steps + 1):
        drift = 0.0005 * (step - 2000) if step > 2000 else 0.0
        emit.loss(step, 2.0 + 5.0 / step ** 0.5 + drift + 0.01 * ((step * 7919) % 13 - 6) / 6)
        if step > 3000 and step % 10 == 0 and stop.wait(0.05):
            return


@pytest.mark.binary
@pytest.mark.slow
def test_degrading_run_fires_in_prometheus_and_reaches_receivers(stack):
    """WTwinLossDegradation fires in Prometheus, Alertmanager posts it, wtwind's signed webhook too."""
    prom, recv, daemon = stack["prom"], stack["recv"], stack["daemon"]
    wait_for(lambda: up(prom + "/-/ready"), 30, 0.1, "prometheus ready")
    wait_for(lambda: up(stack["am"] + "/-/ready"), 30, 0.1, "alertmanager ready")
    emit = connect(daemon.ipc, run="e2e-degrade")
    stop = threading.Event()
    trainer = threading.Thread(target=degrade, args=(emit, stop), daemon=True)
    trainer.start()
    try:
        query = urllib.parse.quote('ALERTS{alertname="WTwinLossDegradation",alertstate="firing"}')

        def firing():
            res = api(f"{prom}/api/v1/query?query={query}")["data"]["result"]
            return [r["metric"] for r in res if r["metric"].get("run") == "e2e-degrade"]
        try:
            (labels, *_) = wait_for(firing, 60, 0.2, "WTwinLossDegradation firing in Prometheus")
        except AssertionError as exc:  # say what Prometheus and the receiver did see
            seen = api(f"{prom}/api/v1/query?query=" + urllib.parse.quote("ALERTS or wtwind_run_alert_active"))
            got = [r.json()["alerts"][0]["labels"] for r in recv.requests("/wtwind")]
            raise AssertionError(f"{exc}; Prometheus: {seen['data']['result']}; wtwind sent: {got}") from None
        assert labels["severity"] == "warning"
        rules = api(f"{prom}/api/v1/rules?type=alert")["data"]["groups"]
        assert {r["name"] for g in rules for r in g["rules"]} >= {"WTwinLossDegradation", "WTwindDown"}

        def via_alertmanager():
            return [a for r in recv.requests("/alertmanager") for a in r.json()["alerts"]
                    if a["labels"]["alertname"] == "WTwinLossDegradation" and a["status"] == "firing"]
        (am_alert, *_) = wait_for(via_alertmanager, 30, 0.2, "Alertmanager webhook with WTwinLossDegradation")
        assert am_alert["labels"]["run"] == "e2e-degrade"
        assert am_alert["annotations"]["runbook_url"].endswith("docs/runbooks/WTwinLossDegradation.md")
        assert "vs forecast" in am_alert["annotations"]["description"]

        def direct():
            return [r for r in recv.requests("/wtwind")
                    if Webhook(SECRET).verify(r.body, r.headers)["alerts"][0]["labels"]["kind"]
                    in ("drift", "plateau", "overfit", "divergence")]
        (req, *_) = wait_for(direct, 30, 0.2, "wtwind's own signed webhook")
        doc = json.loads(req.body)
        assert doc["version"] == "4" and doc["receiver"] == "hook"
        assert doc["alerts"][0]["labels"]["alertname"] in ("WTwinLossDegradation", "WTwinLossDivergence")
        m = daemon.metrics()
        assert m[("wtwind_deliveries_total", (("outcome", "success"), ("sink", "hook")))] >= 1
        assert m[("wtwind_outbox_pending", (("sink", "hook"),))] == 0
    finally:
        stop.set()
        trainer.join(10)
        emit.close()


@pytest.mark.binary
@pytest.mark.slow
def test_run_that_nans_and_exits_at_once_reaches_alertmanager(stack):
    """A trainer hits NaN and exits within one scrape interval (1 s): wtwind holds the
    ended run's series, so WTwinLossNonFinite fires in Prometheus and Alertmanager posts
    it; the counter backstop WTwinCriticalAlertsRaised fires too."""
    prom, recv, daemon = stack["prom"], stack["recv"], stack["daemon"]
    wait_for(lambda: up(prom + "/-/ready"), 30, 0.1, "prometheus ready")
    wait_for(lambda: up(stack["am"] + "/-/ready"), 30, 0.1, "alertmanager ready")
    scraped = urllib.parse.quote('wtwind_alerts_total{kind="nonfinite",severity="critical"}')
    wait_for(lambda: api(f"{prom}/api/v1/query?query={scraped}")["data"]["result"], 30, 0.2,
             "a first scrape of wtwind (the counter at 0)")
    emit = connect(daemon.ipc, run="e2e-nan")
    for step in range(1, 21):
        emit.loss(step, 2.0 + 1.0 / step)
    emit.loss(21, float("nan"))
    emit.close("failed")
    status, body = http_get(daemon.url + "/api/runs/e2e-nan")
    run = json.loads(body)
    assert status == 200 and run["status"] == "failed"
    lived = run["last_seen"] - run["first_seen"]  # as wtwind saw it: run_start to run_end
    assert lived < 1.0, f"the run lived {lived:.2f} s, not within one scrape interval"

    def via_alertmanager():
        return [a for r in recv.requests("/alertmanager") for a in r.json()["alerts"]
                if a["labels"]["alertname"] == "WTwinLossNonFinite" and a["status"] == "firing"]
    try:
        (am_alert, *_) = wait_for(via_alertmanager, 30, 0.2, "Alertmanager webhook with WTwinLossNonFinite")
    except AssertionError as exc:
        seen = api(f"{prom}/api/v1/query?query=" + urllib.parse.quote("ALERTS or wtwind_run_alert_active"))
        raise AssertionError(f"{exc}; Prometheus: {seen['data']['result']}") from None
    assert am_alert["labels"]["run"] == "e2e-nan" and am_alert["labels"]["severity"] == "critical"
    status = urllib.parse.quote('wtwind_run_status{run="e2e-nan",status="failed"}')
    assert api(f"{prom}/api/v1/query?query={status}")["data"]["result"][0]["value"][1] == "1"
    backstop = urllib.parse.quote('ALERTS{alertname="WTwinCriticalAlertsRaised",alertstate="firing"}')
    (fired, *_) = wait_for(lambda: api(f"{prom}/api/v1/query?query={backstop}")["data"]["result"],
                           30, 0.2, "the counter backstop firing")
    assert fired["metric"]["kind"] == "nonfinite"


def healthy_with_spikes(emit, stop: threading.Event, max_steps: int = 100_000) -> None:
    """A clean power-law curve with a one-batch outlier at step 1200 (and every 2,000
    steps after), gone at the next step: the daemon holds it as an ``info`` spike for its
    100-step quiet streak. The first 1,100 steps at once, then ~20 steps/s until stopped,
    so the info finding stays up for several 1 s scrapes."""
    for step in range(1, max_steps + 1):
        bump = 3.0 if step % 2000 == 1200 else 0.0
        emit.loss(step, 2.0 + 5.0 / step ** 0.5 + bump + 0.01 * ((step * 7919) % 13 - 6) / 6)
        if step > 1100 and stop.wait(0.05):
            return


def query(prom: str, expr: str) -> list:
    return api(f"{prom}/api/v1/query?query=" + urllib.parse.quote(expr))["data"]["result"]


def evaluated_after(prom: str, t: float) -> bool:
    """Every rule group of Prometheus has been evaluated since ``t`` (unix seconds)."""
    from datetime import datetime
    groups = api(f"{prom}/api/v1/rules?type=alert")["data"]["groups"]
    return bool(groups) and all(datetime.fromisoformat(g["lastEvaluation"][:26].rstrip("Z") + "+00:00")
                                .timestamp() > t for g in groups)


@pytest.mark.binary
@pytest.mark.slow
@pytest.mark.parametrize("stack", [""], indirect=True, ids=["no-routes"])
def test_info_findings_of_a_healthy_run_reach_no_receiver(stack):
    """A healthy run whose daemon findings are all `info` (one-batch spikes that recover):
    Prometheus scrapes them at severity 1, no shipped rule fires, Alertmanager posts
    nothing, and wtwind's own webhook sink (no routes: the default) sends nothing. A NaN
    run in the same stack then reaches both, so the silence is not a broken path."""
    prom, recv, daemon, am = stack["prom"], stack["recv"], stack["daemon"], stack["am"]
    wait_for(lambda: up(prom + "/-/ready"), 30, 0.1, "prometheus ready")
    wait_for(lambda: up(am + "/-/ready"), 30, 0.1, "alertmanager ready")
    emit = connect(daemon.ipc, run="e2e-healthy")
    stop = threading.Event()
    trainer = threading.Thread(target=healthy_with_spikes, args=(emit, stop), daemon=True)
    trainer.start()
    try:
        info = 'wtwind_run_alert_severity{run="e2e-healthy"} == 1'
        wait_for(lambda: query(prom, info), 60, 0.2, "an info finding scraped by Prometheus")
        seen_at = time.time()
        assert not query(prom, 'wtwind_run_alert_severity{run="e2e-healthy"} >= 2')
        for _ in range(3):  # three evaluations of every rule after the info was scraped
            wait_for(lambda: evaluated_after(prom, seen_at), 30, 0.2, "a rule evaluation")
            seen_at = time.time()
        assert query(prom, 'ALERTS{run="e2e-healthy"}') == []
        assert [a for a in api(f"{am}/api/v2/alerts") if a["labels"].get("run") == "e2e-healthy"] == []
        markers = json.loads(http_get(daemon.url + "/api/runs/e2e-healthy")[1])["markers"]
        assert {m["kind"] for m in markers} == {"spike"}, markers  # the page shows them
        assert {m["severity"] for m in markers} == {"info"}, markers
    finally:
        stop.set()
        trainer.join(10)
        emit.close()
    # the control: the same stack pages a NaN, at Alertmanager's receiver and wtwind's own
    nan = connect(daemon.ipc, run="e2e-nan-control")
    for step in range(1, 21):
        nan.loss(step, 2.0 + 1.0 / step)
    nan.loss(21, float("nan"))
    nan.close("failed")

    def posted(path, key):
        return [a for r in recv.requests(path) for a in r.json()["alerts"]
                if a["labels"].get(key) in ("e2e-nan-control", "WTwinLossNonFinite")]
    wait_for(lambda: posted("/wtwind", "run"), 30, 0.2, "wtwind's webhook with the NaN")
    wait_for(lambda: [a for a in posted("/alertmanager", "alertname") if a["labels"]["run"] == "e2e-nan-control"],
             30, 0.2, "Alertmanager with the NaN")
    for path in ("/alertmanager", "/wtwind"):
        leaked = [a["labels"] for r in recv.requests(path) for a in r.json()["alerts"]
                  if a["labels"].get("run") == "e2e-healthy"]
        assert leaked == [], (path, leaked)
