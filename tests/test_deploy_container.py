"""deploy/docker and the container's files: checked by parsing them and by the real tools
that are installed (there is no Docker engine here).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from helpers import need_binary  # noqa: E402
from wtwin.daemon import config as config_mod  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


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
