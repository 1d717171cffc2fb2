"""deploy/ as the tools would resolve it, not only as written (issue 23, item 4).

No Docker engine and no ``docker compose`` plugin are installed here (``docker compose
version``: "unknown command"), so the compose files are resolved by this test the way the
Compose Specification says: variables interpolated in every value (``${VAR:-default}``
when unset or empty, ``${VAR-default}`` when unset, ``${VAR:?error}``, ``$$`` for ``$``),
then build args against the Dockerfile's ``ARG`` defaults (a build arg given a value,
even an empty one, overrides the default; only an absent or null one leaves it). The
setup steps of compose.yaml's header are run for real (``wtwind keys generate``, ``cp``)
and the resulting files checked against the container's user. The systemd header and
the k8s generator are checked for what they need from the machine.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "deploy" / "docker"
_VAR = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                  r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: str, env: dict[str, str]) -> str:
    """One string, interpolated per the Compose Specification."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg")
        have = env.get(name)
        if op in (":-", "-"):
            use_default = have is None or (op == ":-" and have == "")
            return interpolate(arg, env) if use_default else have
        if op in (":?", "?"):
            if have is None or (op == ":?" and have == ""):
                raise ValueError(f"{name}: {arg}")
            return have
        return have or ""
    return _VAR.sub(sub, value)


def resolve(node, env):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, dict):
        return {k: resolve(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, env) for v in node]
    return node


def compose(env: dict[str, str], *files: str) -> dict:
    """compose.yaml (and overlays: services merged key by key), interpolated with ``env``."""
    out: dict = {}
    for name in files or ("compose.yaml",):
        doc = resolve(yaml.safe_load((DOCKER / name).read_text()), env)
        for key, value in doc.items():
            if key == "services":
                svcs = out.setdefault("services", {})
                for svc, body in value.items():
                    svcs[svc] = {**svcs.get(svc, {}), **body}
            elif isinstance(value, dict):
                out.setdefault(key, {}).update(value)
            else:
                out[key] = value
    return out


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions, one list per stage."""
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    out: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        if op.upper() == "FROM":
            out.append([])
        out[-1].append((op.upper(), rest.strip()))
    return out


def build_args(service: dict) -> dict[str, str]:
    """The ARG values the last stage sees: Dockerfile defaults, overridden by the compose
    service's build args that have a value (an empty string is a value)."""
    args = {}
    for op, rest in stages()[-1]:
        if op == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
    given = service["build"].get("args") or {}
    args.update({k: str(v) for k, v in given.items() if v is not None})
    return args


class TestComposeResolved:
    @pytest.mark.parametrize("env", [{}, {"WTWIN_EXTRAS": ""}])
    @pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.shards.yaml")])
    def test_unset_or_empty_extras_still_installs_the_daemon(self, env, files):
        """With WTWIN_EXTRAS unset or empty, every wtwind image installs wtwin[daemon]."""
        env = {"GRAFANA_ADMIN_PASSWORD": "x", **env}
        for name, svc in compose(env, *files)["services"].items():
            if "build" in svc:
                extras = build_args(svc)["EXTRAS"].split(",")
                assert "daemon" in extras, f"{name}: EXTRAS={extras}"

    def test_extras_set_by_the_user_pass_through(self):
        svc = compose({"GRAFANA_ADMIN_PASSWORD": "x", "WTWIN_EXTRAS": "daemon,spectral"})["services"]["wtwind"]
        assert build_args(svc)["EXTRAS"] == "daemon,spectral"

    def test_grafana_password_is_required(self):
        """${GRAFANA_ADMIN_PASSWORD:?...}: compose refuses to start without it."""
        with pytest.raises(ValueError, match="GRAFANA_ADMIN_PASSWORD"):
            compose({})

    def test_the_alertmanager_entrypoint_keeps_its_shell_variables(self):
        """$$VAR reaches the container's shell as $VAR (compose does not eat it)."""
        cmd = " ".join(compose({"GRAFANA_ADMIN_PASSWORD": "x"})["services"]["alertmanager"]["entrypoint"])
        assert '"$SLACK_WEBHOOK_URL"' in cmd and "$$" not in cmd

    def test_bind_mounts_resolve_to_header_folders_the_container_user_owns(self, tmp_path):
        """Run the header's setup steps; every folder bind-mounted under /etc/wtwind is one the
        header chowns to the image's USER, and the key files have the right modes."""
        header = [ln[1:].strip() for ln in (DOCKER / "compose.yaml").read_text().splitlines()
                  if ln.startswith("#   ")]
        wtwind = [sys.executable, "-m", "wtwin.daemon.cli"]
        chowned: set[str] = set()
        for line in header:
            cmd = shlex.split(line.split("#", 1)[0])
            if cmd[:3] == ["wtwind", "keys", "generate"]:
                subprocess.run(wtwind + cmd[1:], cwd=tmp_path, check=True, capture_output=True, timeout=60)
            elif cmd[:1] == ["mkdir"]:
                for part in " ".join(cmd).split("&&"):
                    subprocess.run(shlex.split(part), cwd=tmp_path, check=True, timeout=30)
            elif cmd[:2] == ["sudo", "chown"]:
                owner, *targets = [c for c in cmd[2:] if not c.startswith("-")]
                chowned.update(targets)
                user = next(rest for op, rest in stages()[-1] if op == "USER")
                assert owner == user, (owner, user)
        svc = compose({"GRAFANA_ADMIN_PASSWORD": "x"})["services"]["wtwind"]
        for vol in svc["volumes"]:
            src, dst = vol.split(":")[:2]
            if dst.startswith("/etc/wtwind/"):
                assert src.removeprefix("./") in chowned, f"{src} -> {dst} is not chowned"
                assert (tmp_path / src).is_dir(), src
        mode = lambda p: stat.S_IMODE(os.stat(tmp_path / p).st_mode)  # noqa: E731
        assert mode("keys/wtwind.key_secret") == 0o600 and mode("keys/wtwind.key") == 0o644
        assert mode("clients/trainer.key") == 0o644


class TestHostCheckAsDeployed:
    @pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.shards.yaml")])
    def test_browser_health_check_and_prometheus_get_in_a_rebinding_page_does_not(self, files):
        """Each wtwind service, with the env compose gives it: the host's browser at the
        published port, the container's health check and Prometheus's target pass the real
        Host check; Host: evil.example does not (issue 24, DNS rebinding)."""
        from wtwin.daemon import config as config_mod
        from wtwin.daemon.web.guard import _names, host_ok

        resolved = compose({"GRAFANA_ADMIN_PASSWORD": "x"}, *files)
        prom = yaml.safe_load((DOCKER / ("prometheus.shards.yml" if len(files) > 1 else "prometheus.yml")).read_text())
        targets = {t for job in prom["scrape_configs"] if job["job_name"] == "wtwind"
                   for sc in job["static_configs"] for t in sc["targets"]}
        for name, svc in resolved["services"].items():
            if "build" not in svc:
                continue
            env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
            http = config_mod.load(DOCKER / "wtwind.toml", environ=env).http
            names = _names(http)
            assert names is not None, f"{name}: Host is not checked"
            hosts = [f"127.0.0.1:{http.port}"]  # the HEALTHCHECK
            for port in svc["ports"]:
                published, inner = port.split()[0].split(":")[-2:]
                if int(inner) == http.port:
                    hosts += [f"127.0.0.1:{published}", f"localhost:{published}"]
            hosts += [t for t in targets if t.split(":")[0] == name]
            assert len(hosts) == 4, (name, hosts)
            for host in hosts:
                assert host_ok(host, names, http.port), (name, host)
            assert not host_ok("evil.example", names, http.port)
            assert not host_ok(f"evil.example:{http.port}", names, http.port)


class TestImage:
    def test_builder_stage_compiles_the_core(self):
        """The build stage copies setup.py and installs a C compiler; the image refuses to
        build unless the compiled core loads."""
        build, final = stages()[0], stages()[-1]
        copied = " ".join(rest for op, rest in build if op == "COPY")
        assert "setup.py" in copied.split()
        assert any(op == "RUN" and re.search(r"apt-get install .*\bgcc\b", rest) for op, rest in build)
        # compiling is opt-in (setup.py): without WTWIN_COMPILE=1 the wheel would be pure
        assert any(op == "RUN" and re.search(r"WTWIN_COMPILE=1 pip wheel\b", rest) for op, rest in build)
        assert any(op == "RUN" and "COMPILED" in rest for op, rest in final)
        assert not any(op == "RUN" and "gcc" in rest for op, rest in final)  # no compiler shipped

    def test_build_time_check_needs_no_mounted_files(self):
        """The image build validates the config without the key files mounted only at run time."""
        runs = " ".join(rest for op, rest in stages()[-1] if op == "RUN")
        assert "--print-config" in runs and "--check" not in runs


class TestSystemdAndK8sFromACheckout:
    def test_systemd_header_installs_from_a_checkout_or_a_wheel(self):
        """Every pip install in the unit's header names a local path or wheel, not an index name."""
        text = (ROOT / "deploy" / "systemd" / "wtwind.service").read_text()
        installs = [ln for ln in text.splitlines() if ln.startswith("#") and "pip install" in ln]
        assert installs
        for line in installs:
            target = shlex.split(line.split("pip install", 1)[1].split("#")[0])[0]
            assert target.startswith(("$PWD", "$(ls dist/")) or target.endswith(".whl"), line

    def test_prometheusrule_generator_needs_no_yaml_library(self):
        """gen_prometheusrule.py --check runs where PyYAML is not installed."""
        gen = ROOT / "deploy" / "k8s" / "gen_prometheusrule.py"
        code = ("import runpy, sys; sys.modules['yaml'] = None; sys.argv = ['gen', '--check']; "
                f"runpy.run_path({str(gen)!r}, run_name='__main__')")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
