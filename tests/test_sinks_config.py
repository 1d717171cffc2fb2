"""[[sinks]], [[routes]], [delivery] in wtwind's TOML: parsed, checked, round-tripped."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wtwin.daemon import config as config_mod
from wtwin.daemon.configdump import to_toml
from wtwin.daemon.errors import ConfigError
from wtwin.sinks.log import LogConfig
from wtwin.sinks.slack import SlackConfig
from wtwin.sinks.webhook import WebhookConfig

TOML = """
[[sinks]]
type = "slack"
name = "team"
url_env = "TEAM_SLACK_URL"
link_base_url = "https://wtwind.example"

[[sinks]]
type = "webhook"
name = "hook"
url = "https://hooks.example/x"
secret_file = "/run/secrets/hook"
headers = { "X-Team" = "llm" }

[[routes]]
sinks = ["team"]
kinds = ["drift", "nonfinite"]
runs = "prod-*"
for_s = 60

[[routes]]
sinks = ["hook"]

[delivery.retry]
max_attempts = 5
base_s = 1.0
"""


def wtwind(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


class TestLoad:
    def test_sections_become_frozen_configs(self, tmp_path):
        """Each [[sinks]] table becomes its type's config; routes and retry are typed too."""
        path = tmp_path / "w.toml"
        path.write_text(TOML)
        cfg = config_mod.load(path, environ={})
        team, hook = cfg.sinks
        assert isinstance(team, SlackConfig) and team.url_env == "TEAM_SLACK_URL"
        assert isinstance(hook, WebhookConfig) and hook.headers == {"X-Team": "llm"}
        assert cfg.routes[0].kinds == ("drift", "nonfinite") and cfg.routes[0].for_s == 60.0
        assert cfg.delivery.retry.max_attempts == 5 and cfg.delivery.retry.cap_s == 300.0

    def test_default_is_the_log_sink(self):
        """No [[sinks]]: the embedded default log sink."""
        assert config_mod.load(None, environ={}).sinks == (LogConfig(),)

    def test_print_config_round_trips(self, tmp_path):
        """--print-config output (with type keys) loads back to the same config."""
        path = tmp_path / "w.toml"
        path.write_text(TOML)
        cfg = config_mod.load(path, environ={})
        again = tmp_path / "again.toml"
        again.write_text(to_toml(cfg))
        assert config_mod.load(again, environ={}) == cfg

    @pytest.mark.parametrize("snippet, message", [
        ('[[sinks]]\ntype = "slack"\nname = "t"\nurl_env = "U"\ncolour = "red"\n', "sinks[0].colour: unknown key"),
        ('[[sinks]]\ntype = "pager"\n', "sinks[0].type: 'pager' is not one of"),
        ('[[sinks]]\ntype = "slack"\nname = "t"\nurl = "https://x"\n', "sinks[0].url: unknown key"),
        ('[[routes]]\nsinks = ["nope"]\n', "routes[0].sinks: unknown sink 'nope'"),
        ('[[routes]]\nsinks = ["log"]\nkinds = ["bogus"]\n', "routes.kinds: unknown 'bogus'"),
        ('[delivery.retry]\nmax_attempts = 0\n', "retry.max_attempts must be an int >= 1"),
    ])
    def test_errors_name_the_key(self, tmp_path, snippet, message):
        """Bad sink/route/delivery config is a ConfigError naming the key."""
        path = tmp_path / "w.toml"
        path.write_text(snippet)
        with pytest.raises(ConfigError) as err:
            config_mod.load(path, environ={})
        assert message in str(err.value)


class TestSecrets:
    def test_build_sinks_resolves_from_the_environment_mapping(self, tmp_path):
        """Secrets resolve against the mapping given; an unset one is a daemon ConfigError."""
        path = tmp_path / "w.toml"
        path.write_text('[[sinks]]\ntype = "slack"\nname = "t"\nurl_env = "T_URL"\n')
        cfg = config_mod.load(path, environ={})
        (sink,) = config_mod.build_sinks(cfg, {"T_URL": "https://hooks.example/t"})
        assert sink.name == "t"
        with pytest.raises(ConfigError, match="sinks.t.url_env: environment variable T_URL is unset"):
            config_mod.build_sinks(cfg, {})

    def test_check_resolves_secrets(self, tmp_path):
        """wtwind --check fails (rc 2) on an unset secret variable and passes once it is set."""
        path = tmp_path / "w.toml"
        path.write_text('[[sinks]]\ntype = "slack"\nname = "t"\nurl_env = "WTWIN_TEST_UNSET_URL"\n')
        bad = wtwind("--check", "-c", str(path))
        assert bad.returncode == 2 and "WTWIN_TEST_UNSET_URL is unset" in bad.stderr
        good = wtwind("--check", "-c", str(path), env={"WTWIN_TEST_UNSET_URL": "https://hooks.example/t"})
        assert good.returncode == 0, good.stderr


def test_docs_example_loads(tmp_path):
    """The [[sinks]]/[[routes]]/[delivery] example in docs/SINKS.md is a valid config."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs/SINKS.md").read_text()
    path = tmp_path / "example.toml"
    path.write_text(re.search(r"```toml\n(.*?)```", doc, re.S).group(1))
    cfg = config_mod.load(path, environ={})
    assert [s.name for s in cfg.sinks] == ["training", "alertmanager-compatible", "log"]
    assert len(cfg.routes) == 3 and cfg.routes[1].runs == "prod-*"
