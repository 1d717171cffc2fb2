"""[[sinks]], [[routes]], [delivery] in wtwind's TOML: parsed, checked, round-tripped."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wtwin.daemon import config as config_mod
from wtwin.daemon.config import DaemonConfig
from wtwin.daemon.config.dump import to_toml
from wtwin.daemon.config.load import build
from wtwin.daemon.errors import ConfigError
from wtwin.sinks import errors as sink_errors
from wtwin.sinks import secrets
from wtwin.sinks.registry import build_sinks
from wtwin.sinks.log import LogConfig
from wtwin.sinks.routing import RouteConfig
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
        ('[[routes]]\nsinks = ["log"]\nkinds = ["bogus"]\n', "routes[0].kinds: unknown 'bogus'"),
        ('[delivery.retry]\nmax_attempts = 0\n', "delivery.retry.max_attempts must be an int >= 1"),
    ])
    def test_errors_name_the_key(self, tmp_path, snippet, message):
        """Bad sink/route/delivery config is a ConfigError naming the key."""
        path = tmp_path / "w.toml"
        path.write_text(snippet)
        with pytest.raises(ConfigError) as err:
            config_mod.load(path, environ={})
        assert message in str(err.value)


def parse_sinks(tables, routes=()):
    """[[sinks]] (and [[routes]]) tables through the one config walker, as wtwind loads them."""
    return build(DaemonConfig, {"sinks": list(tables), "routes": list(routes)}).sinks


class TestRegistry:
    def test_parse_by_type(self):
        """type selects the config class; the rest are its fields."""
        (cfg,) = parse_sinks([{"type": "slack", "name": "team", "url_env": "U", "link_base_url": "https://x"}])
        assert isinstance(cfg, SlackConfig) and cfg.link_base_url == "https://x"

    def test_unknown_key_names_path(self):
        """An unknown key is reported with its dotted path."""
        with pytest.raises(ConfigError, match=r"sinks\[1\]\.colour: unknown key"):
            parse_sinks([{"type": "log"}, {"type": "webhook", "name": "h", "url": "http://x", "colour": "red"}])

    def test_unknown_type(self):
        """A missing or unknown type lists the known ones."""
        with pytest.raises(ConfigError, match=r"sinks\[0\]\.type: 'pager' is not one of \['alertmanager', 'log', 'slack', 'webhook'\]"):
            parse_sinks([{"type": "pager"}])
        with pytest.raises(ConfigError, match=r"sinks\[0\]\.type: None is not one of"):
            parse_sinks([{"name": "x"}])

    def test_field_errors_prefixed(self):
        """A field error carries the sink's position and the field's name."""
        with pytest.raises(ConfigError, match=r"sinks\[0\]\.timeout_s must be a finite number > 0, got 0"):
            parse_sinks([{"type": "webhook", "name": "h", "url": "http://x", "timeout_s": 0}])

    def test_defaults_and_uniqueness(self):
        """No [[sinks]]: the log sink; no sinks at all, duplicate names and unknown route sinks are errors."""
        assert build(DaemonConfig, {}).sinks == (LogConfig(),)
        with pytest.raises(ConfigError, match="at least one sink"):
            parse_sinks([])
        with pytest.raises(ConfigError, match="used more than once"):
            parse_sinks([{"type": "log"}, {"type": "log"}])
        with pytest.raises(ConfigError, match=r"routes\[0\]\.sinks: unknown sink 'pager'"):
            parse_sinks([{"type": "log"}], [{"sinks": ["pager"]}])
        with pytest.raises(ConfigError, match=r"routes\[0\]\.sinks: unknown sink 'pager'"):
            DaemonConfig(routes=(RouteConfig(sinks=("pager",)),))

    def test_sinks_are_kept_as_given(self):
        """DaemonConfig checks its sinks; it never replaces them."""
        sinks = (SlackConfig(name="a", url_env="U"),)
        assert DaemonConfig(sinks=sinks).sinks is sinks

    def test_env_strings_are_converted(self):
        """The walker converts sink fields like any other (a number from a string)."""
        (cfg,) = parse_sinks([{"type": "log", "max_batch": "7", "linger_s": "0.5"}])
        assert cfg.max_batch == 7 and cfg.linger_s == 0.5

    def test_build_resolves_references(self):
        """build_sinks resolves secrets from the given mapping, not the process environment."""
        (sink,) = build_sinks(parse_sinks([{"type": "slack", "name": "t", "url_env": "MY_URL"}]),
                              {"MY_URL": "https://hooks.example/x"})
        assert sink.name == "t" and sink._url == "https://hooks.example/x"

    def test_one_sink_per_slack_webhook(self):
        """Two Slack sinks on one webhook URL would double its rate: rejected."""
        configs = parse_sinks([{"type": "slack", "name": "a", "url_env": "U"},
                               {"type": "slack", "name": "b", "url_env": "V"}])
        with pytest.raises(ConfigError, match="sinks.b: same webhook URL as sinks.a"):
            build_sinks(configs, {"U": "https://hooks.example/x", "V": "https://hooks.example/x"})
        assert len(build_sinks(configs, {"U": "https://hooks.example/x", "V": "https://hooks.example/y"})) == 2

    def test_one_config_error_class(self):
        """The sinks, the daemon and the detectors raise the same ConfigError."""
        from wtwin.detect.errors import ConfigError as DetectConfigError

        assert sink_errors.ConfigError is ConfigError is DetectConfigError


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

    @pytest.mark.parametrize("environ", [{"T_URL": ""}, {"T_URL": "  \n"}])
    def test_empty_variable_is_an_error_in_plain_words(self, tmp_path, environ):
        """A variable that is set but empty is refused, saying so; it never means "no secret"."""
        path = tmp_path / "w.toml"
        path.write_text('[[sinks]]\ntype = "slack"\nname = "t"\nurl_env = "T_URL"\n')
        cfg = config_mod.load(path, environ={})
        with pytest.raises(ConfigError, match="sinks.t.url_env: environment variable T_URL is empty; "
                                              "an empty secret is refused"):
            config_mod.build_sinks(cfg, environ)

    def test_empty_file_is_an_error(self, tmp_path):
        """An empty secret file is refused, naming the field and the file."""
        f = tmp_path / "secret"
        f.write_text("\n")
        with pytest.raises(ConfigError, match=f"hook.secret_file: {f} is empty"):
            secrets.resolve("hook.secret", None, str(f), {})

    def test_http_token_uses_the_same_resolver(self, tmp_path):
        """[http] token_env: unset and empty are errors naming http.token_env; set, it is returned."""
        http = config_mod.HttpConfig(token_env="TOK")
        with pytest.raises(ConfigError, match="http.token_env: environment variable TOK is unset"):
            http.token({})
        with pytest.raises(ConfigError, match="http.token_env: environment variable TOK is empty"):
            http.token({"TOK": ""})
        assert http.token({"TOK": "0123456789abcdef"}) == "0123456789abcdef"

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
