"""The Alertmanager sink: postable alerts, its config, and a real wtwind posting to a real
Alertmanager (``prometheus-alertmanager``), which routes to a local webhook receiver."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse

import pytest

from helpers import Daemon, free_port, need_binary, wait_for
from test_e2e_alerting import api, start_alertmanager, up
from wtwin.emitters import connect
from wtwin.detect.alert import Alert
from wtwin.sinks.alertmanager import AlertmanagerConfig, AlertmanagerSink, postable
from wtwin.sinks.errors import ConfigError, SinkError
from wtwin.daemon.config import DaemonConfig
from wtwin.daemon.config.load import build
from http_recorder import Recorder, Reply, ThreadedRecorder

T0 = 1_700_000_000.0


def alert(status="firing", **kw) -> Alert:
    base = dict(run="gpt-7b", kind="nonfinite", severity="critical", status=status, step=400,
                started_at=T0, message="loss is nan at step 400", loss=float("nan"))
    if status == "resolved":
        base["ended_at"] = T0 + 30
    return Alert(**{**base, **kw})


class TestPostable:
    def test_firing_ends_after_the_ttl_and_resolved_at_its_end(self):
        firing = postable(alert(), T0 + 5, 3600.0, "http://wtwind:9464")
        assert firing["labels"] == {"alertname": "WTwinLossNonFinite", "run": "gpt-7b",
                                    "kind": "nonfinite", "severity": "critical"}
        assert firing["startsAt"] == "2023-11-14T22:13:20.000Z"
        assert firing["endsAt"] == "2023-11-14T23:13:25.000Z"
        assert firing["generatorURL"] == "http://wtwind:9464/runs/gpt-7b"
        assert firing["annotations"]["description"] == "loss is nan at step 400"
        resolved = postable(alert("resolved"), T0 + 40, 3600.0)
        assert resolved["endsAt"] == "2023-11-14T22:13:50.000Z" and "generatorURL" not in resolved


def parse_sink(table):
    """One [[sinks]] table through the config walker, as wtwind loads it."""
    return build(DaemonConfig, {"sinks": [table]}).sinks[0]


class TestConfig:
    def test_parsed_from_toml_table(self):
        cfg = parse_sink({"type": "alertmanager", "name": "am", "url": "http://127.0.0.1:9093"})
        assert isinstance(cfg, AlertmanagerConfig) and cfg.max_batch == 64

    @pytest.mark.parametrize("table, msg", [
        ({"name": "am"}, "exactly one of url"),
        ({"name": "am", "url": "ftp://x"}, "http:// or https://"),
        ({"name": "am", "url": "http://x", "headers": {"Authorization": "Bearer t"}}, "authorization_env"),
        ({"name": "am", "url": "http://x", "firing_ttl_s": 0}, "firing_ttl_s"),
        ({"name": "am", "url": "http://x", "bogus": 1}, "unknown key"),
        ({"name": "am", "url": "http://user:pw@x"}, "url_env or url_file"),  # as the webhook: no literal secret
    ])
    def test_bad_config_names_the_key(self, table, msg):
        with pytest.raises(ConfigError, match=msg):
            parse_sink({"type": "alertmanager", **table})

    def test_authorization_from_the_environment(self):
        cfg = AlertmanagerConfig(name="am", url="http://x", authorization_env="AM_AUTH")
        with pytest.raises(ConfigError, match="AM_AUTH is unset"):
            AlertmanagerSink.build(cfg, {})
        sink = AlertmanagerSink.build(cfg, {"AM_AUTH": "Bearer s3cret"})
        assert sink._headers["Authorization"] == "Bearer s3cret"


class TestAgainstAServer:
    def test_posts_the_batch_to_the_v2_api_and_raises_on_errors(self):
        async def go():
            async with Recorder(script=[Reply(200, ""), Reply(400, "bad alert")]) as rec:
                cfg = AlertmanagerConfig(name="am", url=rec.url, authorization_env="A")
                sink = AlertmanagerSink.build(cfg, {"A": "Bearer t"})
                await sink.send([alert(), alert(kind="divergence")])
                with pytest.raises(SinkError) as err:
                    await sink.send([alert()])
                await sink.aclose()
                return rec.requests, err.value
        reqs, err = asyncio.run(go())
        assert reqs[0].path == "/hook/api/v2/alerts"  # under the base URL, as behind a route prefix
        assert reqs[0].headers["Authorization"] == "Bearer t"
        assert [a["labels"]["kind"] for a in json.loads(reqs[0].body)] == ["nonfinite", "divergence"]
        assert err.status == 400


@pytest.fixture
def alertmanager(tmp_path):
    am_bin = need_binary("prometheus-alertmanager")
    recv = ThreadedRecorder()
    port = free_port()
    proc = start_alertmanager(am_bin, tmp_path, port, f"{recv.base}/am")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: up(url + "/-/ready"), 30, 0.1, "alertmanager ready")
        yield url, recv
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        recv.close()


@pytest.mark.binary
@pytest.mark.slow
def test_wtwind_posts_to_a_real_alertmanager_which_routes_it(alertmanager, tmp_path):
    """NaN: the alert is in Alertmanager's API and its route posts it to the receiver;
    finite losses again: wtwind posts the resolution and the receiver gets "resolved"."""
    url, recv = alertmanager
    cfg = tmp_path / "wtwind.toml"
    cfg.write_text(f"""
[[sinks]]
type = "alertmanager"
name = "am"
url = "{url}"
link_base_url = "http://wtwind.example:9464"

[delivery.retry]
base_s = 0.05
cap_s = 0.5
""")
    with Daemon(args=("--config", str(cfg)), tmpdir=str(tmp_path)) as d:
        emit = connect(d.ipc, run="am-nan")
        for step in range(1, 21):
            emit.loss(step, 2.0 + 1.0 / step)
        emit.loss(21, float("nan"))
        query = urllib.parse.quote('alertname="WTwinLossNonFinite"')
        (held, *_) = wait_for(lambda: api(f"{url}/api/v2/alerts?filter={query}"), 20, 0.2,
                              "the alert in Alertmanager's API")
        assert held["labels"]["run"] == "am-nan" and held["status"]["state"] == "active"
        assert held["generatorURL"] == "http://wtwind.example:9464/runs/am-nan"

        def routed(status):
            return [a for r in recv.requests("/am") for a in r.json()["alerts"]
                    if a["labels"]["alertname"] == "WTwinLossNonFinite" and a["status"] == status]
        (firing, *_) = wait_for(lambda: routed("firing"), 20, 0.2, "the receiver got it firing")
        assert firing["labels"]["severity"] == "critical" and firing["labels"]["kind"] == "nonfinite"
        for step in range(22, 200):  # the policy resolves after 100 quiet steps
            emit.loss(step, 2.0 + 1.0 / step)
        wait_for(lambda: routed("resolved"), 20, 0.2, "the receiver got it resolved")
        emit.close()
        m = d.metrics()
        assert m[("wtwind_deliveries_total", (("outcome", "success"), ("sink", "am")))] >= 2
