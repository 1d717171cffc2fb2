"""The limits a client can fill add up to less than the memory budget (issue 38's "every
byte a client can cause is inside the budget"): the shipped defaults under the 2 GiB
default, and `wtwind --check` refusing a config whose limits do not fit, in words."""

from __future__ import annotations

import json

from helpers import Daemon
from test_preflight import cfg_of, wtwind
from wtwin.daemon.config import DaemonConfig, RunsConfig
from wtwin.daemon.memory_sum import over_budget, parts, total


def test_the_shipped_limits_fit_the_default_budget():
    cfg = DaemonConfig()
    assert cfg.budget.memory_bytes == 2 * 2**30
    assert total(cfg) <= cfg.budget.memory_bytes, parts(cfg)
    assert over_budget(cfg) is None
    # every part a client can fill is in the sum, references and parked frames included
    names = " ".join(name for name, _ in parts(cfg))
    for part in ("max_runs", "max_reference_points", "queue_bytes", "series", "cut short"):
        assert part in names


def test_the_sum_follows_the_config():
    small, large = DaemonConfig(), DaemonConfig(runs=RunsConfig(max_reference_points=3_000_000))
    assert total(large) - total(small) == (3_000_000 - small.runs.max_reference_points) * 211


def test_check_refuses_limits_over_the_budget_and_names_the_largest(tmp_path):
    path = cfg_of(tmp_path, "[runs]\nmax_reference_points = 3000000\n")
    r = wtwind("--config", str(path), "--check")
    assert r.returncode == 2, r.stderr
    assert "add up to" in r.stderr and "memory_bytes" in r.stderr and "reference curves" in r.stderr
    path = cfg_of(tmp_path, "[runs]\nmax_reference_points = 3000000\n[budget]\nmemory_bytes = 4294967296\n")
    r = wtwind("--config", str(path), "--check")
    assert r.returncode == 0 and "config OK" in r.stdout, r.stderr


def test_a_daemon_started_over_its_budget_says_so_once_and_runs(tmp_path):
    """`--check` refuses such a config; started anyway, wtwind warns at start, in the
    same words, and serves (the limits are a worst case, not a use)."""
    with Daemon(tmpdir=str(tmp_path), extra_env={"WTWIND_BUDGET__MEMORY_BYTES": "200000000"}) as d:
        warned = [json.loads(line) for line in d.log().splitlines()
                  if '"limits_over_budget"' in line]
        assert len(warned) == 1 and warned[0]["level"] == "warning", d.log()[-2000:]
        assert "add up to" in warned[0]["problem"] and "over the budget of 200 MB" in warned[0]["problem"]
    (tmp_path / "fits").mkdir()
    with Daemon(tmpdir=str(tmp_path / "fits")) as d:
        assert '"limits_over_budget"' not in d.log()
