"""The emitter's shard pick (emitters/shards.py) and a daemon's shard name (daemon/config/).

The pick must be a fixed function of the run name and the endpoint list: the same in
every process (whatever PYTHONHASHSEED), on every machine and in every release, or a
resumed run lands on another shard. The golden values below pin it; changing them is
changing where every run lives (docs/SHARDING.md). The daemons themselves are tested
in test_sharding_daemons.py.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

import pytest

from wtwin.daemon import config as config_mod
from wtwin.daemon.errors import ConfigError
from wtwin.emitters import Emitter, connect, shards

from helpers import wait_for

EPS3 = tuple(f"tcp://wtwind-{i}.wtwind:5557" for i in range(3))
DOWN = ("tcp://127.0.0.1:9", "tcp://127.0.0.1:7")  # nothing listens: the emitters only pick


class TestParse:
    @pytest.mark.parametrize("given", [
        "tcp://a:1,tcp://b:2", "tcp://a:1, tcp://b:2", " tcp://a:1\n\ttcp://b:2 ", "tcp://a:1 ,, tcp://b:2,",
        ["tcp://a:1", "tcp://b:2"], ("tcp://a:1,tcp://b:2",), ["tcp://a:1", "tcp://b:2", "tcp://a:1"]])
    def test_commas_and_whitespace_separate_and_duplicates_go(self, given):
        assert shards.parse(given) == ("tcp://a:1", "tcp://b:2")

    def test_a_single_endpoint_is_a_list_of_one(self):
        assert shards.parse("ipc:///run/wtwind/wtwind.sock") == ("ipc:///run/wtwind/wtwind.sock",)

    @pytest.mark.parametrize("given", ["", " , ", [], [" "]])
    def test_an_empty_list_is_refused_in_plain_words(self, given):
        with pytest.raises(ValueError, match="no wtwind endpoint given"):
            shards.parse(given)

    def test_a_non_string_is_refused(self):
        with pytest.raises(TypeError, match="must be a string"):
            shards.parse(["tcp://a:1", 5557])


class TestPick:
    def test_golden_values(self):
        """Pinned: these are where runs live. A change here moves runs between shards."""
        assert shards.weight("tcp://wtwind-0.wtwind:5557", "gpt-7b-lr3e-4") == 3193887803189522826
        got = {r: EPS3.index(shards.pick(r, EPS3)) for r in
               ("gpt-7b-lr3e-4", "llama-ft-2", "run-0", "run-1", "run-2", "run-3", "ü-run")}
        assert got == {"gpt-7b-lr3e-4": 2, "llama-ft-2": 0, "run-0": 1, "run-1": 2, "run-2": 2,
                       "run-3": 0, "ü-run": 0}

    def test_the_same_in_processes_with_other_hash_seeds(self):
        """Python's str hash is salted per process; the pick is not."""
        runs = [f"run-{i}" for i in range(300)] + ["ü-run", "a b", ""]
        mine = [shards.pick(r, EPS3) for r in runs]
        code = ("import json, sys; from wtwin.emitters import shards; "
                "runs, eps = json.load(sys.stdin); "
                "print(json.dumps([shards.pick(r, tuple(eps)) for r in runs] + [hash('salt')]))")
        salts = set()
        for seed in ("1", "4242", "random"):
            out = subprocess.run([sys.executable, "-c", code], input=json.dumps([runs, EPS3]),
                                 capture_output=True, text=True, timeout=60, check=True,
                                 env=dict(os.environ, PYTHONHASHSEED=seed))
            *theirs, salt = json.loads(out.stdout)
            assert theirs == mine
            salts.add(salt)
        assert len(salts) > 1  # the processes did hash strings differently

    def test_the_order_of_the_list_does_not_matter(self):
        runs = [f"r{i}" for i in range(500)]
        assert [shards.pick(r, EPS3) for r in runs] == [shards.pick(r, EPS3[::-1]) for r in runs]

    def test_runs_spread_evenly(self):
        eps = tuple(f"tcp://wtwind-{i}.wtwind:5557" for i in range(4))
        counts = collections.Counter(shards.pick(f"job-{i}", eps) for i in range(20_000))
        assert set(counts) == set(eps)
        assert all(4_500 < n < 5_500 for n in counts.values()), counts

    def test_adding_a_shard_moves_about_one_in_n_plus_one_all_to_it(self):
        four = tuple(f"tcp://wtwind-{i}.wtwind:5557" for i in range(4))
        five = four + ("tcp://wtwind-4.wtwind:5557",)
        runs = [f"job-{i}" for i in range(20_000)]
        moved = [r for r in runs if shards.pick(r, four) != shards.pick(r, five)]
        assert 0.17 < len(moved) / len(runs) < 0.23
        assert {shards.pick(r, five) for r in moved} == {five[-1]}

    def test_removing_a_shard_moves_only_its_runs(self):
        three = EPS3[:2] + ("tcp://wtwind-2.wtwind:5557",)
        runs = [f"job-{i}" for i in range(10_000)]
        before = {r: shards.pick(r, three) for r in runs}
        for r in runs:
            after = shards.pick(r, three[:2])
            assert after == before[r] or before[r] == three[2]

    def test_the_pick_is_cheap(self):
        """Made once per emitter, never per call: microseconds (16 shards: ~13 us measured,
        bench/emitter_cost.py; the bound is loose for a busy shared host)."""
        eps = tuple(f"tcp://wtwind-{i}.wtwind:5557" for i in range(16))
        times = []
        for i in range(200):
            t0 = time.perf_counter()
            shards.pick(f"run-{i}", eps)
            times.append(time.perf_counter() - t0)
        assert sorted(times)[len(times) // 2] < 500e-6

    def test_the_cli_says_where_a_run_lives(self, capsys, monkeypatch):
        out = subprocess.run([sys.executable, "-W", "error", "-m", "wtwin.emitters", "shard",
                              "gpt-7b-lr3e-4", ",".join(EPS3)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == EPS3[2] and not out.stderr, out.stderr
        monkeypatch.setenv("WTWIN_ENDPOINT", " ".join(EPS3))
        assert shards.main(["shard", "gpt-7b-lr3e-4"]) == 0
        assert capsys.readouterr().out.strip() == EPS3[2]
        monkeypatch.delenv("WTWIN_ENDPOINT")
        assert shards.main(["shard", "gpt-7b-lr3e-4"]) == 2
        assert "set WTWIN_ENDPOINT" in capsys.readouterr().err
        assert shards.main(["gpt-7b-lr3e-4"]) == 2 and "usage:" in capsys.readouterr().err


class TestEmitter:
    def test_a_list_picks_the_runs_shard_whatever_its_spelling(self, monkeypatch):
        want = shards.pick("run-x", DOWN)
        monkeypatch.setenv("WTWIN_ENDPOINT", " , ".join(DOWN))
        emitters = [Emitter(list(DOWN), run="run-x"), Emitter(endpoints=DOWN[::-1], run="run-x"),
                    Emitter(",".join(DOWN), run="run-x"), Emitter(run="run-x"),
                    connect(DOWN, "run-x")]
        try:
            for e in emitters:
                assert e.endpoint == want and set(e.endpoints) == set(DOWN)
        finally:
            for e in emitters:
                e.close(timeout=0.2)

    def test_one_endpoint_is_used_as_given(self):
        e = Emitter("tcp://127.0.0.1:9", run="one")
        e.close(timeout=0.2)
        assert e.endpoint == "tcp://127.0.0.1:9" and e.endpoints == ("tcp://127.0.0.1:9",)

    def test_endpoint_and_endpoints_together_are_refused(self):
        with pytest.raises(ValueError, match="not both"):
            Emitter("tcp://127.0.0.1:9", endpoints=DOWN, run="x")

    def test_the_unreachable_warning_names_the_runs_shard(self, caplog):
        e = Emitter(DOWN, run="lonely", warn_unacked_s=0.05, linger_ms=0)
        try:
            e.loss(1, 2.0)
            wait_for(lambda: e.stats["unreachable"], what="the emitter to call the shard unreachable")
        finally:
            e.close(timeout=0.3)
        text = caplog.text
        assert e.endpoint in text and "this run's shard, 1 of 2" in text


class TestShardName:
    def test_default_is_no_shard(self):
        assert config_mod.load(None, environ={}).shard.name is None

    def test_file_env_and_flag_each_override_the_last(self, tmp_path):
        path = tmp_path / "wtwind.toml"
        path.write_text('[shard]\nname = "from-file"\n')
        assert config_mod.load(path, environ={}).shard.name == "from-file"
        env = {"WTWIND_SHARD__NAME": "wtwind-1"}
        assert config_mod.load(path, environ=env).shard.name == "wtwind-1"
        assert config_mod.load(path, environ=env, shard="cli-2").shard.name == "cli-2"

    @pytest.mark.parametrize("bad", ["", "-x", "a b", "a/b", "x" * 64, 'a"b'])
    def test_bad_names_are_refused_in_plain_words(self, bad):
        with pytest.raises(ConfigError, match=r"shard\.name: .* is not a shard name"):
            config_mod.load(None, environ={"WTWIND_SHARD__NAME": bad})

    def test_the_cli_flag_reaches_the_config(self, capsys):
        from wtwin.daemon.cli import main

        assert main(["--shard", "wtwind-3", "--print-config"]) == 0
        assert 'name = "wtwind-3"' in capsys.readouterr().out
        assert main(["--shard", "no good", "--check"]) == 2
        assert "not a shard name" in capsys.readouterr().err
