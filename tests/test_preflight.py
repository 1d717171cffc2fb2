"""Preflight (issue 23): ``wtwind`` without its extra names it and exits 2; ``--check``
loads every file the config names, as start-up would; a config that binds HTTP beyond
loopback needs allowed_hosts or a token (issue 24)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from wtwin.daemon import config as config_mod
from wtwin.daemon.entry import EXTRAS
from wtwin.daemon.preflight import problems

ROOT = Path(__file__).resolve().parent.parent


def wtwind(*args, env=None, pre="pass"):
    """``wtwind`` in a subprocess; ``pre`` runs first (to hide an installed module)."""
    code = f"import sys; {pre}; from wtwin.daemon.entry import wtwind; sys.exit(wtwind())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **(env or {})))


class TestMissingExtra:
    @pytest.mark.parametrize("module", ["standardwebhooks", "structlog", "aiohttp"])
    def test_names_the_extra_and_exits_2(self, module):
        """A venv without the daemon extra: one line naming it, exit 2, no traceback."""
        r = wtwind("--check", pre=f"sys.modules[{module!r}] = None")
        assert r.returncode == 2, r.stderr
        assert "pip install 'wtwin[daemon]'" in r.stderr and "Traceback" not in r.stderr

    def test_every_extra_dependency_has_its_module_named(self):
        """Every requirement of the daemon's extras maps to a module in entry.EXTRAS."""
        from importlib.metadata import packages_distributions

        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        dist_to_mod = {}
        for mod, dists in packages_distributions().items():
            for dist in dists:
                dist_to_mod.setdefault(re.sub(r"[-_.]+", "-", dist.lower()), set()).add(mod)
        for extra in ("daemon", "spectral", "dask", "plot", "tensorboard"):
            for req in extras[extra]:
                name = re.sub(r"[-_.]+", "-", re.split(r"[<>=\[ ;]", req)[0].lower())
                if name == "wtwin":
                    continue
                mods = dist_to_mod.get(name)
                if mods is None:
                    pytest.skip(f"{name} not installed here")
                assert mods & set(EXTRAS), f"{extra}: {req} -> {mods}, not in entry.EXTRAS"


def cfg_of(tmp_path, text: str):
    path = tmp_path / "w.toml"
    path.write_text(text + f'\n[state]\npath = "{tmp_path}/db/wtwind.db"\n'
                    f'[listen]\nendpoints = ["ipc://{tmp_path}/run/wtwind.sock"]\n')
    return path


class TestCheckLoadsFiles:
    def test_unreadable_curve_key_fails_check_then_generated_one_passes(self, tmp_path):
        """A server key file that is missing or not a key fails --check (rc 2, names the key)."""
        (tmp_path / "clients").mkdir()
        path = cfg_of(tmp_path, f'[curve]\nserver_key_file = "{tmp_path}/keys/wtwind.key_secret"\n'
                      f'allowed_clients_dir = "{tmp_path}/clients"\n')
        r = wtwind("--config", str(path), "--check")
        assert r.returncode == 2 and "curve.server_key_file" in r.stderr, r.stderr
        (tmp_path / "keys").mkdir()
        (tmp_path / "keys" / "wtwind.key_secret").write_text("not a key\n")
        r = wtwind("--config", str(path), "--check")
        assert r.returncode == 2 and "curve.server_key_file" in r.stderr, r.stderr
        os.unlink(tmp_path / "keys" / "wtwind.key_secret")
        assert wtwind("keys", "generate", "--dir", str(tmp_path / "keys")).returncode == 0
        r = wtwind("--config", str(path), "--check")
        assert r.returncode == 0 and "config OK" in r.stdout, r.stderr

    def test_bad_client_key_token_and_store_are_each_reported(self, tmp_path):
        """A bad client key, an unset token variable and a store that is not a database:
        three problems, each named."""
        clients = tmp_path / "clients"
        clients.mkdir()
        (clients / "x.key").write_text("garbage")
        (tmp_path / "db").mkdir()
        (tmp_path / "db" / "wtwind.db").write_bytes(b"not sqlite" * 100)
        path = cfg_of(tmp_path, '[curve]\nserver_key_env = "WTWIN_TEST_KEY"\n'
                      f'allowed_clients_dir = "{clients}"\n'
                      '[http]\ntoken_env = "WTWIN_TEST_UNSET_TOKEN"\n')
        cfg = config_mod.load(path, environ={})
        found = problems(cfg, environ={"WTWIN_TEST_KEY": "x" * 40})
        joined = "\n".join(found)
        assert "curve.allowed_clients_dir" in joined and "http.token" in joined
        assert "state.path" in joined and "not a readable wtwind database" in joined

    def test_a_running_daemons_store_passes(self, tmp_path):
        """A store in use (locked) by a daemon is fine: --check locks and creates nothing."""
        from wtwin.daemon.store.db import open_db

        path = cfg_of(tmp_path, "")
        conn, lock = open_db(str(tmp_path / "db" / "wtwind.db"))
        try:
            assert problems(config_mod.load(path, environ={}), environ={}) == []
        finally:
            conn.close()
            lock.release()
        assert not (tmp_path / "run").exists()


class TestExposure:
    @pytest.mark.parametrize("http, ok", [
        ('host = "0.0.0.0"', False),
        ('host = "10.1.2.3"', False),
        ('host = "0.0.0.0"\nallowed_hosts = ["wtwind"]', True),
        ('host = "0.0.0.0"\ntoken_env = "WTWIN_TEST_TOKEN"', True),
        ('host = "127.0.0.1"', True),
        ('host = "::1"', True),
    ])
    def test_beyond_loopback_needs_allowed_hosts_or_a_token(self, tmp_path, http, ok):
        """Bound beyond loopback with no Host check and no token: --check refuses."""
        cfg = config_mod.load(cfg_of(tmp_path, f"[http]\n{http}\n"), environ={})
        found = [p for p in problems(cfg, environ={"WTWIN_TEST_TOKEN": "t" * 32}) if "http.host" in p]
        assert (found == []) == ok, found

    @pytest.mark.parametrize("where", ["docker/wtwind.toml", "systemd/wtwind.toml", "k8s"])
    def test_shipped_configs_pass_the_exposure_check(self, tmp_path, where):
        """Every shipped config binding beyond loopback carries allowed_hosts or a token."""
        if where == "k8s":
            import yaml

            cm = yaml.safe_load((ROOT / "deploy/k8s/configmap.yaml").read_text())
            path = tmp_path / "k8s.toml"
            path.write_text(cm["data"]["wtwind.toml"])
        else:
            path = ROOT / "deploy" / where
        cfg = config_mod.load(path, environ={})
        assert [p for p in problems(cfg, environ={}) if "http.host" in p] == []
