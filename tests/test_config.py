"""Config: TOML into frozen dataclasses, env overrides, errors that name the key."""

import dataclasses
import subprocess
import sys

import pytest

from wtwin.daemon import config
from wtwin.daemon.errors import ConfigError


class TestLoad:
    def test_embedded_defaults_are_valid_and_frozen(self):
        cfg = config.load(environ={})
        assert cfg.http.host == "127.0.0.1" and cfg.http.port == 9464
        with pytest.raises(dataclasses.FrozenInstanceError):
            cfg.http.port = 1

    def test_toml_file_sets_values(self, tmp_path):
        p = tmp_path / "w.toml"
        p.write_text('[http]\nport = 9999\n[listen]\nendpoints = ["tcp://127.0.0.1:6000"]\n')
        cfg = config.load(p, environ={})
        assert cfg.http.port == 9999 and cfg.listen.endpoints == ("tcp://127.0.0.1:6000",)

    def test_env_overrides_file(self, tmp_path):
        p = tmp_path / "w.toml"
        p.write_text("[http]\nport = 9999\n")
        cfg = config.load(p, environ={"WTWIND_HTTP__PORT": "9001"})
        assert cfg.http.port == 9001

    @pytest.mark.parametrize("text,needle", [
        ("[http]\nprot = 1\n", "http.prot: unknown key"),
        ("[htp]\nport = 1\n", "htp: unknown key"),
        ("[http]\nport = 'abc'\n", "http.port: expected int"),
        ("[http]\nport = 70000\n", "http.port: 70000 is not a TCP port"),
        ("[listen]\nendpoints = ['udp://x']\n", "listen.endpoints"),
        ("[detection]\npreset = 'fast'\n", "detection.preset"),
        ("[http\n", "not valid TOML"),
    ])
    def test_bad_config_names_the_key_and_why(self, tmp_path, text, needle):
        p = tmp_path / "w.toml"
        p.write_text(text)
        with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
            config.load(p, environ={})

    def test_missing_file_is_a_config_error(self, tmp_path):
        with pytest.raises(ConfigError, match="not found"):
            config.load(tmp_path / "nope.toml", environ={})


class TestCheckCommand:
    def run(self, *args):
        return subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", *args],
                              capture_output=True, text=True, timeout=60)

    def test_check_ok_exits_zero(self, tmp_path):
        p = tmp_path / "w.toml"
        p.write_text("[http]\nport = 9500\n")
        r = self.run("--config", str(p), "--check")
        assert r.returncode == 0 and "config OK" in r.stdout

    def test_check_bad_key_exits_nonzero_and_names_it(self, tmp_path):
        p = tmp_path / "w.toml"
        p.write_text("[runs]\nmax_runs = 0\n")
        r = self.run("--config", str(p), "--check")
        assert r.returncode == 2 and "runs.max_runs" in r.stderr

    def test_version(self):
        r = self.run("--version")
        assert r.returncode == 0 and r.stdout.startswith("wtwind ")


class TestPrintConfig:
    def test_printed_config_loads_back_to_the_same_config(self, tmp_path):
        from wtwin.daemon.config.dump import to_toml

        cfg = config.load(environ={})
        p = tmp_path / "dump.toml"
        p.write_text(to_toml(cfg))
        assert config.load(p, environ={}) == cfg
