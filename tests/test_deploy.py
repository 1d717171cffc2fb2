"""deploy/: systemd unit, container files, Kubernetes manifests, Grafana dashboard.

There is no Docker engine or Kubernetes cluster here: the container and cluster files
are checked by parsing them, by validating the manifests against the Kubernetes
schemas (``kubernetes-validate``, offline), and by the real tools that are installed
(``systemd-analyze verify``, ``promtool``, ``amtool``; skipped when absent unless CI).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from _integrations import InProcessDaemon, http_get, wait_for  # noqa: E402
from helpers import need_binary  # noqa: E402
from wtwin.daemon import config as config_mod  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
CI = os.environ.get("CI") == "true"


def unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, empty_lines_in_values=False)
    cp.optionxform = str
    cp.read(DEPLOY / "systemd" / "wtwind.service")
    return cp


def k8s_docs() -> dict[str, list[dict]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
            for p in sorted(K8S.glob("*.yaml"))}


def k8s_kind(kind: str) -> dict:
    return next(d for docs in k8s_docs().values() for d in docs if d["kind"] == kind)


def _secs(v: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|min)?", v.strip())
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "min": 60, None: 1}[m.group(2)]


class TestSystemd:
    def test_unit_is_type_notify_with_watchdog_and_config_in_etc(self):
        """Type=notify, a watchdog, config from /etc/wtwind, clean SIGTERM stop, restart on failure."""
        svc = unit()["Service"]
        assert svc["Type"] == "notify" and svc["NotifyAccess"] == "main"
        assert _secs(svc["WatchdogSec"]) >= 10
        assert shlex.split(svc["ExecStart"])[1:] == ["--config", "/etc/wtwind/wtwind.toml"]
        assert "--check" in svc["ExecStartPre"]
        assert svc["KillSignal"] == "SIGTERM" and svc["Restart"] == "on-failure"
        assert svc["StateDirectory"] == "wtwind" and svc["RuntimeDirectory"] == "wtwind"

    def test_unit_is_hardened(self):
        """The usual sandboxing options are on and no capability is kept."""
        svc = unit()["Service"]
        for key in ("NoNewPrivileges", "PrivateTmp", "ProtectKernelTunables", "ProtectKernelModules",
                    "ProtectControlGroups", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality"):
            assert svc[key] == "yes", key
        assert svc["ProtectSystem"] == "strict"
        assert svc["CapabilityBoundingSet"] == "" and svc["User"] == "wtwind"
        assert "@system-service" in svc["SystemCallFilter"]

    def test_shipped_config_matches_the_unit(self):
        """/etc/wtwind/wtwind.toml loads, its socket is in RuntimeDirectory, its db in StateDirectory."""
        path = DEPLOY / "systemd" / "wtwind.toml"
        cfg = config_mod.load(path, environ={})
        assert "ipc:///run/wtwind/wtwind.sock" in cfg.listen.endpoints
        assert cfg.state.path.startswith("/var/lib/wtwind/")
        assert _secs(unit()["Service"]["WatchdogSec"]) >= 4 * cfg.tick_s

    def test_systemd_analyze_verify(self, tmp_path):
        """systemd-analyze verify accepts the unit (ExecStart pointed at this venv's wtwind)."""
        tool = need_binary("systemd-analyze")
        wtwind = Path(sys.executable).parent / "wtwind"
        if not wtwind.exists():
            pytest.skip("wtwind console script not installed in this venv")
        text = (DEPLOY / "systemd" / "wtwind.service").read_text()
        (tmp_path / "wtwind.service").write_text(text.replace("/opt/wtwin/bin/wtwind", str(wtwind)))
        r = subprocess.run([tool, "verify", str(tmp_path / "wtwind.service")],
                           capture_output=True, text=True, timeout=60)
        bad = [ln for ln in (r.stdout + r.stderr).splitlines()
               if re.search(r"Unknown|Failed to parse|Invalid|not executable", ln)]
        assert r.returncode == 0 and not bad, r.stdout + r.stderr


def dockerfile() -> list[tuple[str, str]]:
    text = (DEPLOY / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


class TestContainer:
    def test_dockerfile_slim_non_root_entrypoint_healthcheck(self):
        """Slim base, a numeric non-root USER, wtwind as ENTRYPOINT, a HEALTHCHECK on /readyz."""
        ins = dockerfile()
        assert all("slim" in arg for op, arg in ins if op == "FROM")
        user = [arg for op, arg in ins if op == "USER"][-1]
        assert user.split(":")[0] not in ("0", "root")
        assert json.loads(next(arg for op, arg in ins if op == "ENTRYPOINT")) == ["wtwind"]
        health = next(arg for op, arg in ins if op == "HEALTHCHECK")
        assert "/readyz" in health and "127.0.0.1:9464" in health

    def test_dockerfile_copies_exist_and_are_not_ignored(self):
        """Every COPY source exists and is let through by Dockerfile.dockerignore."""
        allowed = [ln[1:].rstrip("/") for ln in
                   (DEPLOY / "docker" / "Dockerfile.dockerignore").read_text().splitlines()
                   if ln.startswith("!")]
        for op, arg in dockerfile():
            if op == "COPY" and not arg.startswith("--from"):
                for src in arg.split()[:-1]:
                    assert (ROOT / src).exists(), src
                    assert any(src.rstrip("/") == a or src.startswith(a + "/") for a in allowed), src

    def test_dockerfile_copies_every_package_folder(self):
        """The wheel built in the image has every folder pyproject maps into wtwin."""
        import tomllib

        folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
        copied = {arg.split()[0].rstrip("/") for op, arg in dockerfile()
                  if op == "COPY" and not arg.startswith("--from")}
        assert folders <= copied, folders - copied

    def test_container_config_matches_exposed_ports(self):
        """The image's config loads and listens where EXPOSE and the HEALTHCHECK say."""
        cfg = config_mod.load(DEPLOY / "docker" / "wtwind.toml", environ={})
        exposed = {int(p) for op, arg in dockerfile() if op == "EXPOSE" for p in arg.split()}
        tcp_ports = {int(ep.rsplit(":", 1)[1]) for ep in cfg.listen.endpoints if ep.startswith("tcp://")}
        assert cfg.http.host == "0.0.0.0" and {cfg.http.port} | tcp_ports == exposed

    def test_compose_services_mounts_and_shipped_rules(self):
        """wtwind, Prometheus, Alertmanager, Grafana; every bind mount exists; Prometheus gets the shipped rules."""
        base = DEPLOY / "docker"
        compose = yaml.safe_load((base / "compose.yaml").read_text())
        svcs = compose["services"]
        assert set(svcs) == {"wtwind", "prometheus", "alertmanager", "grafana"}
        assert (base / svcs["wtwind"]["build"]["context"] / svcs["wtwind"]["build"]["dockerfile"]).exists()
        mounts = {}
        for name, svc in svcs.items():
            for vol in svc.get("volumes", []):
                src, dst = vol.split(":")[:2]
                if src.startswith((".", "/")):
                    assert (base / src).exists(), f"{name}: {src}"
                    mounts[dst] = (base / src).resolve()
                else:
                    assert src.split(":")[0] in compose["volumes"] or src.startswith("${"), src
        assert mounts["/etc/prometheus/wtwin.rules.yml"] == (DEPLOY / "prometheus" / "wtwin.rules.yml")
        prov = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/wtwin.yml").read_text())
        assert mounts[prov["providers"][0]["options"]["path"]] == DEPLOY / "grafana" / "dashboards"
        am = svcs["alertmanager"]
        assert {"SLACK_WEBHOOK_URL", "SLACK_CHANNEL", "WEBHOOK_URL"} <= set(am["environment"])

    def test_compose_prometheus_config_with_promtool(self, tmp_path):
        """promtool check config passes on compose's prometheus.yml with the rules as mounted."""
        promtool = need_binary("promtool")
        shutil.copy(DEPLOY / "docker" / "prometheus.yml", tmp_path / "prometheus.yml")
        shutil.copy(DEPLOY / "prometheus" / "wtwin.rules.yml", tmp_path / "wtwin.rules.yml")
        r = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "SUCCESS" in r.stdout + r.stderr

    def test_compose_shards_overlay_adds_a_second_shard_that_prometheus_scrapes(self, tmp_path):
        """compose.shards.yaml: two shards with their own names, stores and host ports, both
        scraped by its prometheus.shards.yml (promtool), whose rest is compose's own."""
        base = DEPLOY / "docker"
        main = yaml.safe_load((base / "compose.yaml").read_text())
        over = yaml.safe_load((base / "compose.shards.yaml").read_text())
        svcs = over["services"]
        one, two = main["services"]["wtwind"], svcs["wtwind-1"]
        assert two["build"] == one["build"] and two["image"] == one["image"]
        names = {svcs["wtwind"]["environment"]["WTWIND_SHARD__NAME"], two["environment"]["WTWIND_SHARD__NAME"]}
        assert names == {"wtwind-0", "wtwind-1"}
        for shard_name in names:
            assert config_mod.load(DEPLOY / "docker" / "wtwind.toml",
                                   environ={"WTWIND_SHARD__NAME": shard_name}).shard.name == shard_name
        host_ports = [p.rsplit(":", 1)[0] for s in (one, two) for p in s["ports"]]
        assert len(set(host_ports)) == len(host_ports) == 4
        assert [p for p in two["ports"] if not p.startswith("5558")][0].startswith("127.0.0.1:")
        state = {v.split(":")[0] for v in two["volumes"] if v.endswith(":/var/lib/wtwind")}
        assert state and state <= set(over["volumes"]) and not state & set(main["volumes"])
        assert {v.rsplit(":", 2)[1] for v in two["volumes"]} == {v.rsplit(":", 2)[1] for v in one["volumes"]}
        prom_mount = svcs["prometheus"]["volumes"][0].split(":")
        assert prom_mount[1] == "/etc/prometheus/prometheus.yml" and (base / prom_mount[0]).exists()
        shards_cfg = yaml.safe_load((base / prom_mount[0]).read_text())
        single_cfg = yaml.safe_load((base / "prometheus.yml").read_text())
        (job,) = shards_cfg["scrape_configs"]
        assert job["job_name"] == "wtwind"
        assert job["static_configs"][0]["targets"] == ["wtwind:9464", "wtwind-1:9464"]
        assert {k: v for k, v in shards_cfg.items() if k != "scrape_configs"} == \
            {k: v for k, v in single_cfg.items() if k != "scrape_configs"}
        promtool = need_binary("promtool")
        shutil.copy(base / "prometheus.shards.yml", tmp_path / "prometheus.yml")
        shutil.copy(DEPLOY / "prometheus" / "wtwin.rules.yml", tmp_path / "wtwin.rules.yml")
        r = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "SUCCESS" in r.stdout + r.stderr, r.stdout + r.stderr

    def test_alertmanager_template_renders_to_a_valid_config(self, tmp_path):
        """The env-rendered Alertmanager config passes amtool check-config, with no placeholder left."""
        amtool = need_binary("amtool")
        secret = tmp_path / "slack_url"
        secret.write_text("https://hooks.example.invalid/T000")
        text = (DEPLOY / "docker" / "alertmanager.yml.tmpl").read_text()
        text = (text.replace("@SLACK_CHANNEL@", "#ml-alerts").replace("@WEBHOOK_URL@", "http://hook:9/x")
                .replace("/tmp/am/slack_url", str(secret)))
        assert "@" not in re.sub(r"#.*", "", text).replace("#ml-alerts", "")
        (tmp_path / "am.yml").write_text(text)
        r = subprocess.run([amtool, "check-config", str(tmp_path / "am.yml")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


class TestKubernetes:
    def test_manifests_parse_and_kustomization_lists_them(self):
        """Every manifest parses; kustomization.yaml lists all of them but the example Secret."""
        docs = k8s_docs()
        kust = docs.pop("kustomization.yaml")[0]
        docs.pop("secret.example.yaml")
        assert sorted(kust["resources"]) == sorted(docs)

    def test_core_manifests_validate_against_kubernetes_schemas(self):
        """Deployment, Service, ConfigMap, PVC, Secret validate (strict) with kubernetes-validate."""
        kv = pytest.importorskip("kubernetes_validate") if not CI else __import__("kubernetes_validate")
        checked = 0
        for name, docs in k8s_docs().items():
            for doc in docs:
                if doc.get("apiVersion", "").startswith(("v1", "apps/")):
                    kv.validate(doc, kv.latest_version(), strict=True)
                    checked += 1
        assert checked == 5

    def test_probes_ports_and_references_line_up(self):
        """Probes hit /healthz and /readyz on a declared port; names referenced exist."""
        dep, svc = k8s_kind("Deployment"), k8s_kind("Service")
        pod = dep["spec"]["template"]["spec"]
        c = pod["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert c[probe]["httpGet"]["port"] in ports
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports)
        assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        cm = k8s_kind("ConfigMap")
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
        assert vols["state"]["persistentVolumeClaim"]["claimName"] == k8s_kind("PersistentVolumeClaim")["metadata"]["name"]
        secret = k8s_kind("Secret")
        refs = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e]
        assert refs and all(r["name"] == secret["metadata"]["name"] and r["key"] in secret["stringData"]
                            for r in refs)
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
        assert pod["securityContext"]["runAsNonRoot"] and dep["spec"]["replicas"] == 1

    def test_configmap_config_loads_and_matches_the_ports(self, tmp_path):
        """The ConfigMap's wtwind.toml is a valid config serving the container's ports."""
        cm = k8s_kind("ConfigMap")
        path = tmp_path / "wtwind.toml"
        path.write_text(cm["data"]["wtwind.toml"])
        cfg = config_mod.load(path, environ={})
        c = k8s_kind("Deployment")["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert cfg.http.port == ports["http"] and cfg.http.host == "0.0.0.0"
        assert f"tcp://0.0.0.0:{ports['zmq']}" in cfg.listen.endpoints
        assert c["args"] == ["--config", "/etc/wtwind/wtwind.toml"]

    def test_servicemonitor_selects_the_service(self):
        """The ServiceMonitor selects the Service by label and scrapes its named http port."""
        sm, svc = k8s_kind("ServiceMonitor"), k8s_kind("Service")
        assert sm["apiVersion"] == "monitoring.coreos.com/v1"
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        ep = sm["spec"]["endpoints"][0]
        assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]} and ep["path"] == "/metrics"

    def test_prometheusrule_is_generated_from_the_rules_file(self, tmp_path):
        """The PrometheusRule's spec equals wtwin.rules.yml; the generator says it is fresh; promtool accepts it."""
        rule = k8s_kind("PrometheusRule")
        rules = yaml.safe_load((DEPLOY / "prometheus" / "wtwin.rules.yml").read_text())
        assert rule["spec"] == rules
        r = subprocess.run([sys.executable, str(K8S / "gen_prometheusrule.py"), "--check"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        promtool = need_binary("promtool")
        (tmp_path / "spec.yml").write_text(yaml.safe_dump(rule["spec"]))
        r = subprocess.run([promtool, "check", "rules", str(tmp_path / "spec.yml")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


SHARDED = DEPLOY / "k8s-sharded"


def sharded_docs() -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(SHARDED.glob("*.yaml"))}


class TestShardedKubernetes:
    """deploy/k8s-sharded: the StatefulSet of shards on top of deploy/k8s (docs/SHARDING.md)."""

    def test_statefulset_and_headless_service_validate_against_kubernetes_schemas(self):
        """The StatefulSet, and the base Service with the headless patch applied, validate (strict)."""
        kv = pytest.importorskip("kubernetes_validate") if not CI else __import__("kubernetes_validate")
        docs = sharded_docs()
        svc = k8s_kind("Service")
        headless = {**svc, "spec": {**svc["spec"], **docs["service-headless.yaml"]["spec"]}}
        for doc in (docs["statefulset.yaml"], headless):
            kv.validate(doc, kv.latest_version(), strict=True)
        assert headless["spec"]["clusterIP"] == "None"

    def test_pods_are_the_deployments_pods_plus_a_shard_name(self):
        """The pod template is deployment.yaml's, but for the shard name (the pod's name) and
        the state volume, which comes from volumeClaimTemplates as the same mount."""
        sts, dep = sharded_docs()["statefulset.yaml"], k8s_kind("Deployment")
        assert sts["kind"] == "StatefulSet" and sts["spec"]["replicas"] >= 2
        pod, base = sts["spec"]["template"], dep["spec"]["template"]
        assert pod["metadata"] == base["metadata"]
        (c,), (bc,) = pod["spec"]["containers"], base["spec"]["containers"]
        name_env = c["env"][0]
        assert name_env == {"name": "WTWIND_SHARD__NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        assert {**c, "env": c["env"][1:]} == bc
        vols = [v for v in base["spec"]["volumes"] if v["name"] != "state"]
        assert pod["spec"]["volumes"] == vols
        assert {**pod["spec"], "containers": [bc], "volumes": base["spec"]["volumes"]} == base["spec"]
        (claim,) = sts["spec"]["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == "state" and "state" in {m["name"] for m in c["volumeMounts"]}
        assert claim["spec"] == k8s_kind("PersistentVolumeClaim")["spec"]
        assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
        # the pods' names are valid shard names
        for i in range(sts["spec"]["replicas"]):
            assert config_mod.load(None, environ={"WTWIND_SHARD__NAME": f"{sts['metadata']['name']}-{i}"})

    def test_the_documented_endpoint_list_names_every_pod(self):
        """The WTWIN_ENDPOINT the kustomization shows is one stable DNS name per pod, at the zmq port."""
        from wtwin.emitters import shards

        sts, text = sharded_docs()["statefulset.yaml"], (SHARDED / "kustomization.yaml").read_text()
        svc = k8s_kind("Service")
        assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
        assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
        listed = re.search(r'WTWIN_ENDPOINT="([^"]+)"', text).group(1)
        zmq = next(p["containerPort"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]
                   if p["name"] == "zmq")
        name, service = sts["metadata"]["name"], sts["spec"]["serviceName"]
        assert shards.parse(listed) == tuple(f"tcp://{name}-{i}.{service}.<namespace>.svc:{zmq}"
                                             for i in range(sts["spec"]["replicas"]))

    def test_kustomize_renders_the_shards_without_the_single_daemon(self):
        """kubectl kustomize (offline): the StatefulSet replaces the Deployment and its PVC; the
        Service is headless; every v1/apps object validates. Skipped without kubectl."""
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            pytest.skip("kubectl not installed (the checks above cover the files without it)")
        r = subprocess.run([kubectl, "kustomize", str(SHARDED)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        docs = [d for d in yaml.safe_load_all(r.stdout) if d]
        kinds = sorted(d["kind"] for d in docs)
        assert kinds == ["ConfigMap", "NetworkPolicy", "PrometheusRule", "Service", "ServiceMonitor",
                         "StatefulSet"]
        svc = next(d for d in docs if d["kind"] == "Service")
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
        kv = pytest.importorskip("kubernetes_validate")
        for doc in docs:
            if doc["apiVersion"].startswith(("v1", "apps/")):
                kv.validate(doc, kv.latest_version(), strict=True)


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


def test_shipped_tomls_are_valid_toml():
    """Every TOML under deploy/ parses (the daemon's --check runs on the two that are configs)."""
    for path in DEPLOY.rglob("*.toml"):
        tomllib.loads(path.read_text())


class TestSafeByDefault:
    """Issue 15, attack 12: the shipped deploys do not expose the daemon to the network."""

    def test_container_config_has_curve_private_ipc_and_checkpoint_roots(self):
        cfg = config_mod.load(DEPLOY / "docker" / "wtwind.toml", environ={})
        assert cfg.curve.enabled and cfg.curve.allowed_clients_dir
        assert int(cfg.listen.ipc_mode, 8) & 0o007 == 0
        assert cfg.jobs.checkpoint_roots == ("/checkpoints",)

    def test_compose_publishes_http_on_loopback_only_and_has_no_default_password(self):
        import yaml

        svcs = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())["services"]
        for name, svc in svcs.items():
            for port in svc.get("ports", []):
                if not port.startswith("5557"):  # the ZeroMQ port: CURVE
                    assert port.startswith("127.0.0.1:"), f"{name}: {port}"
        grafana = svcs["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
        assert ":?" in grafana and "admin}" not in grafana
        mounts = [v.rsplit(":", 2)[1] for v in svcs["wtwind"]["volumes"]]
        assert {"/etc/wtwind/keys", "/etc/wtwind/clients"} <= set(mounts)

    def test_k8s_config_has_curve_and_a_network_policy_for_both_ports(self, tmp_path):
        path = tmp_path / "wtwind.toml"
        path.write_text(k8s_kind("ConfigMap")["data"]["wtwind.toml"])
        cfg = config_mod.load(path, environ={})
        assert cfg.curve.enabled and cfg.curve.server_key_env == "WTWIND_CURVE_SERVER_SECRET"
        pol, dep = k8s_kind("NetworkPolicy"), k8s_kind("Deployment")
        assert pol["spec"]["podSelector"]["matchLabels"].items() <= \
            dep["spec"]["template"]["metadata"]["labels"].items()
        ports = {p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
        allowed = {p["port"] for rule in pol["spec"]["ingress"] for p in rule["ports"]}
        assert allowed == ports == {"http", "zmq"}

    def test_emitter_default_socket_is_never_a_shared_tmp_name(self):
        from wtwin.emitters.endpoints import default_ipc_endpoint

        for env in ({}, {"XDG_RUNTIME_DIR": "/run/user/1000"}, {"RUNTIME_DIRECTORY": "/run/wtwind"}):
            ep = default_ipc_endpoint(env)
            assert ep != "ipc:///tmp/wtwind.sock"
            assert not ep.startswith("ipc:///tmp/") or ep.startswith(f"ipc:///tmp/wtwind-{os.getuid()}/")

    def test_daemon_refuses_an_ipc_folder_others_can_write(self, tmp_path):
        from wtwin.daemon.errors import ConfigError
        from wtwin.daemon.receiver import secure_ipc_dir

        open_dir = tmp_path / "open"
        open_dir.mkdir()
        os.chmod(open_dir, 0o777)
        with pytest.raises(ConfigError, match="writable by others"):
            secure_ipc_dir(str(open_dir))
        secure_ipc_dir(str(tmp_path / "fresh"))
        assert os.stat(tmp_path / "fresh").st_mode & 0o777 == 0o750
