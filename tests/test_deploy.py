"""deploy/: systemd unit, Kubernetes manifests, shipped configs (the container files:
test_deploy_container.py; the Grafana dashboard: test_deploy_grafana.py).

There is no Docker engine or Kubernetes cluster here: the container and cluster files
are checked by parsing them, by validating the manifests against the Kubernetes
schemas (``kubernetes-validate``, offline), and by the real tools that are installed
(``systemd-analyze verify``, ``promtool``, ``amtool``; skipped when absent unless CI).
"""

from __future__ import annotations

import configparser
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
