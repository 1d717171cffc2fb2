"""Dead letters through a running wtwind: `wtwind alerts dead|redeliver` over its HTTP API,
and `alerts replay`, redeliver's deprecated name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import Daemon, http_get, sample, wait_for
from wtwin.emitters import connect
from http_recorder import Reply, ThreadedRecorder


def wtwind(daemon, *args) -> subprocess.CompletedProcess:
    """`wtwind <args>` with the daemon's environment (its store path and HTTP port)."""
    return subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", "--config", str(daemon.config), *args],
                          capture_output=True, text=True, timeout=30, env=daemon.env)


def over_http(daemon, *args) -> subprocess.CompletedProcess:
    """`wtwind alerts <args> --url URL`: the daemon's dead-letter HTTP API."""
    return subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", "alerts", *args, "--url", daemon.url],
                          capture_output=True, text=True, timeout=30, env=daemon.env)


@pytest.mark.slow  # 25 s on 2 busy cores (make test-all, CI)
def test_dead_letter_listed_then_redelivered(tmp_path):
    """A 400 dead-letters the alert; after the receiver is fixed, redeliver sends it (same webhook-id)."""
    recv = ThreadedRecorder(default=Reply(400, "bad"))
    cfg = tmp_path / "wtwind.toml"
    cfg.write_text(f'[[sinks]]\ntype = "webhook"\nname = "hook"\nurl = "{recv.base}/hook"\n')
    try:
        with Daemon(args=("--config", str(cfg)), tmpdir=str(tmp_path)) as daemon:
            daemon.config = cfg
            with connect(daemon.ipc, run="nan-run") as emit:
                emit.loss(1, 2.0)
                emit.loss(2, float("nan"))
                wait_for(lambda: sample(daemon, "wtwind_outbox_dead", sink="hook") == 1, what="dead letter")
                listed = over_http(daemon, "dead")
                assert listed.returncode == 0, listed.stderr
                assert "\thook\tdead\t1\tnan-run\tnonfinite\tfiring\t" in listed.stdout
                assert "HTTP 400" in listed.stdout
                from_store = wtwind(daemon, "alerts", "dead", "--sink", "hook")
                assert from_store.returncode == 0, from_store.stderr
                assert "\thook\tdead\t1\tnan-run\tnonfinite\tfiring\t" in from_store.stdout
                recv.set_default(Reply(200, "ok"))
                old = wtwind(daemon, "alerts", "replay", "99999")  # the deprecated name still works
                assert "redelivered 0 dead alert(s)" in old.stdout and "deprecated" in old.stderr
                row_id = from_store.stdout.splitlines()[1].split("\t")[0]
                again = wtwind(daemon, "alerts", "redeliver", row_id)  # by id, through the running daemon
                assert again.returncode == 0, again.stderr
                assert "redelivered 1 dead alert(s)" in again.stdout and again.stderr == ""
                wait_for(lambda: sample(daemon, "wtwind_deliveries_total", sink="hook", outcome="success") == 1,
                         what="redelivered delivery")
                first, last = recv.requests("/hook")[0], recv.requests("/hook")[-1]
                assert first.headers["webhook-id"] == last.headers["webhook-id"]
                assert sample(daemon, "wtwind_outbox_dead", sink="hook") == 0
                status, body = http_get(daemon.url + "/api/sinks")
                (hook,) = json.loads(body)["sinks"]
                assert status == 200 and hook["name"] == "hook" and hook["type"] == "webhook"
                assert hook["healthy"] is True and hook["disabled"] is None and hook["dead"] == 0
                assert hook["deliveries"]["dead"] == 1 and hook["deliveries"]["success"] == 1
                unknown = over_http(daemon, "redeliver", "--all", "--sink", "nope")
                assert unknown.returncode == 1 and "unknown sink" in unknown.stderr
    finally:
        recv.close()


def test_the_old_cli_word_says_it_is_deprecated_then_redelivers(tmp_path):
    """`alerts replay` prints one deprecation line, then is `alerts redeliver` (here: its missing-ids error)."""
    env = dict(os.environ, WTWIND_STATE__PATH=str(tmp_path / "s.db"))
    for word in ("replay", "redeliver"):
        out = subprocess.run([sys.executable, "-m", "wtwin.daemon.cli", "alerts", word],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode != 0 and "alerts redeliver: give delivery row ids" in out.stderr
        deprecated = [line for line in out.stderr.splitlines() if "deprecated" in line]
        assert deprecated == (["wtwind: `alerts replay` is deprecated, use `alerts redeliver`"]
                              if word == "replay" else [])
