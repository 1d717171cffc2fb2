"""Two real `wtwind` shards against one daemon fed the same runs (docs/SHARDING.md).

Three daemon processes, each with its own store: shards ``shard-a`` and ``shard-b``, and
a single daemon with no shard name. Two trainer processes with different PYTHONHASHSEEDs
(tests/_shard_producer.py) send every run twice over real ZeroMQ tcp: to the shards'
endpoint list and to the single daemon. Then, through each daemon's HTTP API only:

- every run is on exactly one shard, the one the pick names in this process and in
  the trainer's (so the hash did not depend on the process);
- each run's page names its shard; the single daemon names none;
- the alerts (every firing and resolution, with step and message) of each run on its
  shard equal the single daemon's, and the shards' alert counters add up to its;
- ``/metrics`` says each shard's name once (``wtwind_shard_info``), and every log line
  of a shard names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import Daemon, http_get, parse_metrics, wait_for
from test_web_browser import browser, page  # noqa: F401  (the real-browser fixtures: chromium, no console errors)
from wtwin.emitters import shards

HERE = Path(__file__).resolve().parent
STEPS = 1200
KINDS = ("drift", "nan", "spike", "diverge", "healthy")
ENV = {"WTWIND_DETECTION__COOLDOWN_S": "0"}  # no wall-clock dedup: alerts follow the events only


def api(d: Daemon, path: str):
    status, body = http_get(d.url + path)
    return status, json.loads(body)


def run_names(a: str, b: str) -> list[str]:
    """Two runs of each kind, one landing on each shard (the endpoints' ports are random,
    so the names are chosen after them: each shard gets every kind of curve)."""
    out = []
    for kind in KINDS:
        for want in (a, b):
            out.append(next(n for i in range(1000) if shards.pick(n := f"{kind}-{i}", (a, b)) == want))
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    daemons = {}
    try:
        for name, args in (("shard-a", ("--shard", "shard-a")), ("shard-b", ()), ("single", ())):
            env = dict(ENV, **({"WTWIND_SHARD__NAME": "shard-b"} if name == "shard-b" else {}))
            (tmp / name).mkdir()
            daemons[name] = Daemon(extra_env=env, args=args, tmpdir=str(tmp / name)).start()
        a, b, single = daemons["shard-a"], daemons["shard-b"], daemons["single"]
        runs = run_names(a.tcp, b.tcp)
        listed = f"{a.tcp}, {b.tcp}"  # as WTWIN_ENDPOINT would hold it
        procs = [subprocess.Popen([sys.executable, str(HERE / "_shard_producer.py"), listed, single.tcp,
                                   str(tmp / "secrets"), *runs[i::2]],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONHASHSEED=seed))
                 for i, seed in enumerate(("1", "2"))]
        picked = {}
        try:
            for p in procs:
                out, err = p.communicate(timeout=240)
                assert p.returncode == 0, err
                picked.update(json.loads(out.splitlines()[-1]))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

        def done(d, names):
            got = {r["run"]: r for r in api(d, "/api/runs")[1]["runs"]}
            return all(n in got and got[n]["step"] == STEPS and got[n]["status"] == "completed"
                       for n in names) and got
        for d in (a, b):
            wait_for(lambda: done(d, [r for r in runs if picked[r] == d.tcp]), 60, 0.1, "the shard's runs")
        wait_for(lambda: done(single, runs), 60, 0.1, "every run on the single daemon")
        yield {"a": a, "b": b, "single": single, "runs": runs, "picked": picked}
    finally:
        for d in daemons.values():
            d.stop()


def listing(d: Daemon) -> dict:
    status, body = api(d, "/api/runs")
    assert status == 200
    return body


def test_every_run_is_on_exactly_one_shard_the_one_its_name_picks(fleet):
    a, b, runs = fleet["a"], fleet["b"], fleet["runs"]
    on = {d.tcp: {r["run"] for r in listing(d)["runs"]} for d in (a, b)}
    for run in runs:
        holders = [ep for ep, names in on.items() if run in names]
        assert holders == [shards.pick(run, (a.tcp, b.tcp))] == [fleet["picked"][run]], run
    assert on[a.tcp] | on[b.tcp] == set(runs) and not on[a.tcp] & on[b.tcp]
    assert len(on[a.tcp]) == len(on[b.tcp]) == len(KINDS)


def test_the_run_pages_name_the_shard(fleet):
    for d, name in ((fleet["a"], "shard-a"), (fleet["b"], "shard-b")):
        body = listing(d)
        assert body["shard"] == name and {r["shard"] for r in body["runs"]} == {name}
        run = body["runs"][0]["run"]
        assert api(d, f"/api/runs/{run}")[1]["shard"] == name
        elsewhere = next(r for r in fleet["runs"] if fleet["picked"][r] != d.tcp)
        status, missing = api(d, f"/api/runs/{elsewhere}")
        assert status == 404 and f"on shard {name}" in missing["error"]
    single = listing(fleet["single"])
    assert single["shard"] is None and {r["shard"] for r in single["runs"]} == {None}


def test_the_pages_show_the_shard_in_a_browser(fleet, page):
    """The list's shard column and header, the run page's shard fact; none on a single daemon."""
    a = fleet["a"]
    page.goto(a.url + "/")
    page.wait_for_selector("#runs tbody tr.run-row")
    assert page.locator("#runs thead th.shard-col").is_visible()
    assert set(page.locator("#runs tbody td.shard-col").all_inner_texts()) == {"shard-a"}
    page.wait_for_function("document.getElementById('conn').textContent.includes('shard shard-a')")
    run = next(r for r in fleet["runs"] if fleet["picked"][r] == a.tcp)
    page.goto(f"{a.url}/runs/{run}")
    page.wait_for_selector('[data-fact="shard"]')
    assert page.locator('[data-fact="shard"] .value').inner_text() == "shard-a"
    page.goto(fleet["single"].url + "/")
    page.wait_for_selector("#runs tbody tr.run-row")
    assert not page.locator("#runs thead th.shard-col").is_visible()
    assert not page.locator("#runs tbody td.shard-col").first.is_visible()
    page.goto(f"{fleet['single'].url}/runs/{run}")
    page.wait_for_selector('[data-fact="status"]')
    assert page.locator('[data-fact="shard"]').count() == 0


def test_the_alerts_are_those_of_one_daemon(fleet):
    """Every alert transition of every run, on its shard and on the single daemon."""
    fired = Counter()
    for run in fleet["runs"]:
        shard = fleet["a"] if fleet["picked"][run] == fleet["a"].tcp else fleet["b"]
        status, there = api(shard, f"/api/runs/{run}")
        status1, alone = api(fleet["single"], f"/api/runs/{run}")
        assert status == status1 == 200
        assert there["markers"] == alone["markers"], run
        assert there["fired"] == alone["fired"] and there["status"] == alone["status"] == "completed"
        fired.update(f"{run.split('-')[0]}:{m['kind']}" for m in there["markers"] if m["status"] == "firing")
    # the curves did fire what they were built to, on both shards
    for want in ("nan:nonfinite", "spike:spike", "diverge:divergence"):
        assert fired[want] >= 2, (want, fired)


def test_every_log_line_of_a_shard_names_it(fleet):
    for d, name in ((fleet["a"], "shard-a"), (fleet["b"], "shard-b"), (fleet["single"], None)):
        lines = [json.loads(ln) for ln in d.log().splitlines() if ln.startswith("{")]
        assert lines and {ln.get("shard") for ln in lines} == {name}, d.log()[-2000:]


def alert_counts(d: Daemon) -> Counter:
    return Counter({labels: v for (name, labels), v in parse_metrics(http_get(d.url + "/metrics")[1]).items()
                    if name == "wtwind_alerts_total" and v})


def test_metrics_name_the_shard_once_and_the_counters_add_up(fleet):
    for d, name in ((fleet["a"], "shard-a"), (fleet["b"], "shard-b")):
        info = {k: v for k, v in parse_metrics(http_get(d.url + "/metrics")[1]).items()
                if k[0] == "wtwind_shard_info"}
        assert info == {("wtwind_shard_info", (("shard", name),)): 1.0}
    assert not any(k[0] == "wtwind_shard_info" for k in fleet["single"].metrics())
    total = alert_counts(fleet["a"]) + alert_counts(fleet["b"])
    assert total and total == alert_counts(fleet["single"])
