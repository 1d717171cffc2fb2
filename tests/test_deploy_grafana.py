"""deploy/grafana: the dashboard's panels and queries, against the metrics a real daemon
exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from _integrations import InProcessDaemon, http_get, wait_for  # noqa: E402

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def dashboard() -> dict:
    return json.loads((DEPLOY / "grafana" / "dashboards" / "wtwin.json").read_text())


def dashboard_queries(d: dict) -> list[str]:
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in d["annotations"]["list"] if "expr" in a]
    exprs += [v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
              for v in d["templating"]["list"] if v["type"] == "query"]
    return exprs


def exported_metric_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            names.add(name)
            if kind == "counter":
                names |= {name + "_total", name + "_created"}
            if kind == "histogram":
                names |= {name + s for s in ("_bucket", "_sum", "_count", "_created")}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


class TestGrafana:
    def test_dashboard_has_the_promised_panels(self):
        """Loss with forecast band per run, W, D, spectral alpha per layer, alerts as annotations."""
        d = dashboard()
        exprs = " ".join(dashboard_queries(d))
        for metric in ("wtwind_run_loss", "wtwind_run_forecast_lower_loss", "wtwind_run_forecast_upper_loss",
                       "wtwind_run_score_w", "wtwind_run_score_d", "wtwind_run_spectral_layer_alpha"):
            assert metric in exprs, metric
        loss = next(p for p in d["panels"] if "wtwind_run_loss" in p["targets"][0]["expr"])
        assert loss["repeat"] == "run"
        fills = [prop for o in loss["fieldConfig"]["overrides"] for prop in o["properties"]
                 if prop["id"] == "custom.fillBelowTo"]
        legends = {t["legendFormat"] for t in loss["targets"]}
        assert fills and all(f["value"] in legends for f in fills)
        ann = [a for a in d["annotations"]["list"] if a.get("expr")]
        assert ann and "wtwind_run_alert_active" in ann[0]["expr"]
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))

    def test_datasource_uid_is_the_provisioned_one(self):
        """Every panel and target uses the datasource uid that provisioning creates."""
        prov = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
        uid = prov["datasources"][0]["uid"]
        d = dashboard()
        for p in d["panels"]:
            assert p["datasource"]["uid"] == uid
            assert all(t["datasource"]["uid"] == uid for t in p["targets"])

    def test_every_query_uses_a_metric_the_daemon_exports(self):
        """Scrape a real wtwind (one run streaming) and check each wtwind_* name in the dashboard."""
        from wtwin.emitters import connect

        with InProcessDaemon(shard__name="dash-0") as d:  # a shard: wtwind_shard_info is there
            emit = connect(d.endpoint, run="dash")
            for t in range(1, 50):
                emit.loss(t, 3.0 / t ** 0.3, lr=1e-3)
            emit.eval(49, val_loss=2.0)
            wait_for(lambda: (r := d.server.table.get("dash")) and r.step == 49, 10, what="events")
            status, text = http_get(d.http + "/metrics")
            emit.close()
        assert status == 200
        exported = exported_metric_names(text)
        used = {m for q in dashboard_queries(dashboard()) for m in re.findall(r"\bwtwind_[a-z0-9_]+", q)}
        assert used and used <= exported, sorted(used - exported)
