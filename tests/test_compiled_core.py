"""The compiled and the pure-Python build of `wtwin.detect` agree to the bit (docs/COMPILED.md).

Every real log (``../shared/data/real-logs`` and ``real-logs-lr``) is replayed through
`wtwin.detect.replay.Session` once per build, each build in its own process (all the
logs in one process per build): the alerts, every finding, every `MonitorState` and the
msgpack bytes of the final ``RunMonitor.snapshot()`` must be identical. The compiled
process also restores each of the pure build's snapshots and must write it back byte
for byte (a store written by one build restores in the other).

Without the logs the replay tests skip, and without a compiled build the compiled side
skips; under ``CI=true`` both are failures.
"""

from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import pathlib
import subprocess
import sys

import pytest

import wtwin.daemon
import wtwin.detect
import wtwin.emitters
from wtwin.compiled import cython_shim
from wtwin.daemon import build as daemon_build
from wtwin.detect import build
from wtwin.emitters import build as emitters_build

from helpers import REPO, Daemon, assert_builds_as_asked, run_pure_python

CI = os.environ.get("CI") == "true"
DATA = REPO.parent / "shared" / "data"
LOG_DIRS = [DATA / "real-logs", DATA / "real-logs-lr"]

REPLAY = r"""
import hashlib, inspect, json, sys
import msgpack
import wtwin.detect as detect
from wtwin.detect.base import REGISTRY
from wtwin.detect.monitor import RunMonitor
from wtwin.detect.replay import Session
from wtwin.offline.logs import read_log

out_path, snaps_path, restore_from, *logs = sys.argv[1:]
result = {"compiled": detect.COMPILED, "build": detect.BUILD,
          "files": {m: getattr(sys.modules["wtwin.detect." + m], "__file__", "")
                    for m in detect.build.MODULES}, "logs": {}, "restored": {}}


def _signature(c) -> list:
    # the pure __init__'s arguments; a detector built from a config record
    # (__init__(self, **args), ForecastConfig) takes that record's fields
    import dataclasses
    params = [p for p in inspect.signature(c.__init__).parameters.values() if p.name != "self"]
    if [p.kind for p in params] == [inspect.Parameter.VAR_KEYWORD] and hasattr(c, "CONFIG"):
        return [f.name for f in dataclasses.fields(c.CONFIG)]
    return [p.name for p in params]


if not detect.COMPILED:    # a compiled __init__ has no signature: ARGS says it
    result["args"] = {n: [list(c.ARGS), _signature(c)] for n, c in REGISTRY.items()
                      if hasattr(c, "ARGS")}
snaps = {}
for path in logs:
    s = Session("log", "pretraining")
    h, alerts, findings = hashlib.sha256(), [], []
    for kind, step, v, lr, grad in read_log(path).events(with_grad=True):
        if kind == "loss":
            st, out = s.loss(step, v, lr, grad)
        else:
            st, out = s.eval(step, {"val_loss": v})
        h.update(repr(st).encode())
        alerts += [[a.kind, a.severity, a.status, a.step, a.message] for a in out]
        findings += [list(f) for f in (st.findings if st else ())]
    snap = msgpack.packb(s.monitor.snapshot(), use_bin_type=True)
    snaps[path] = snap
    result["logs"][path] = {"alerts": alerts, "findings": findings, "states": h.hexdigest(),
                            "snapshot": hashlib.sha256(snap).hexdigest(), "bytes": len(snap)}
if restore_from != "-":
    with open(restore_from, "rb") as f:
        for path, blob in msgpack.unpackb(f.read(), raw=False).items():
            m = RunMonitor()
            m.restore(msgpack.unpackb(blob, raw=False, strict_map_key=False))
            result["restored"][path] = msgpack.packb(m.snapshot(), use_bin_type=True) == blob
with open(snaps_path, "wb") as f:
    f.write(msgpack.packb(snaps, use_bin_type=True))
with open(out_path, "w") as f:
    json.dump(result, f)
"""


def _logs() -> list[str]:
    found = [str(p) for d in LOG_DIRS if d.is_dir() for p in sorted(d.iterdir())
             if p.suffix in (".csv", ".jsonl", ".json") and p.name != "manifest.csv"]
    if not found:
        if CI:
            pytest.fail(f"CI=true but the real logs are absent at {LOG_DIRS}")
        pytest.skip("../shared/data is absent")
    return found


def _compiled_files() -> bool:
    here = pathlib.Path(wtwin.detect.__file__).parent
    return all(any((here / (m + s)).exists() for s in importlib.machinery.EXTENSION_SUFFIXES)
               for m in build.MODULES)


def _run(tmp: pathlib.Path, name: str, pure: bool, logs: list[str], restore_from: str = "-") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "WTWIN_PURE_PYTHON"}
    if pure:
        env["WTWIN_PURE_PYTHON"] = "1"
    res = subprocess.run([sys.executable, "-c", REPLAY, str(tmp / f"{name}.json"),
                          str(tmp / f"{name}.snaps"), restore_from, *logs],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads((tmp / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """(pure, compiled) results of replaying every real log, each build in its process."""
    logs = _logs()
    if not _compiled_files():
        if CI:
            pytest.fail(f"CI=true but the compiled build is missing: {wtwin.detect.BUILD}")
        pytest.skip(f"no compiled build here: {wtwin.detect.BUILD}")
    tmp = tmp_path_factory.mktemp("compiled_core")
    pure = _run(tmp, "pure", True, logs)
    compiled = _run(tmp, "compiled", False, logs, restore_from=str(tmp / "pure.snaps"))
    return pure, compiled


class TestIdentity:
    def test_each_process_ran_the_build_it_was_asked_for(self, replays):
        assert_builds_as_asked(*replays)

    def test_alerts_findings_states_and_snapshots_identical_on_every_real_log(self, replays):
        pure, compiled = replays
        assert pure["logs"].keys() == compiled["logs"].keys()
        for path, p in pure["logs"].items():
            c = compiled["logs"][path]
            name = pathlib.Path(path).name
            assert c["alerts"] == p["alerts"], name
            assert c["findings"] == p["findings"], name
            assert c["states"] == p["states"], f"{name}: a MonitorState differs"
            assert c["snapshot"] == p["snapshot"], f"{name}: the final snapshot differs"
        # the logs do exercise the detectors: pages and resolves among them
        statuses = {a[2] for p in pure["logs"].values() for a in p["alerts"]}
        assert {"firing", "resolved"} <= statuses

    def test_a_snapshot_of_one_build_restores_in_the_other_byte_for_byte(self, replays):
        pure, compiled = replays
        assert compiled["restored"] and all(compiled["restored"].values()), \
            [pathlib.Path(p).name for p, ok in compiled["restored"].items() if not ok]
        assert compiled["restored"].keys() == pure["logs"].keys()

    def test_args_list_the_constructor_arguments(self, replays):
        """``ARGS`` (what clone/repr read) is the pure ``__init__``'s signature."""
        pure, _ = replays
        for name, (args, signature) in pure["args"].items():
            assert args == signature, name


def test_the_shim_has_every_cython_name_the_core_uses():
    """Without Cython, ``import cython`` is `cython_shim`: each ``cython.X`` of every
    compiled module (detect/, daemon/, emitters/) is there."""
    used = set()
    sources = [REPO / folder / f"{m}.py" for folder, modules in (
        ("detect", build.MODULES), ("daemon", daemon_build.MODULES),
        ("emitters", emitters_build.MODULES)) for m in modules]
    for source in sources:
        tree = ast.parse(source.read_text())
        used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                 and isinstance(n.value, ast.Name) and n.value.id == "cython"}
    assert used, "no module of the core uses cython.*"
    assert sorted(n for n in used if not hasattr(cython_shim, n)) == []


def test_pure_python_env_loads_the_py_files(tmp_path):
    """``WTWIN_PURE_PYTHON=1``: COMPILED is False and no module of the core is an extension."""
    code = ("import sys, wtwin.detect as d, wtwin.detect.spike as s;"
            "print(d.COMPILED, s.__file__.endswith('.py'), d.BUILD)")
    assert run_pure_python(code).startswith("False True pure Python (WTWIN_PURE_PYTHON")


def test_a_source_edited_after_the_build_loads_as_python(tmp_path):
    """A stamp that does not match the sources (an edit since the build): the pure build runs."""
    if not _compiled_files():
        if CI:
            pytest.fail(f"CI=true but the compiled build is missing: {wtwin.detect.BUILD}")
        pytest.skip(f"no compiled build here: {wtwin.detect.BUILD}")
    folder = pathlib.Path(wtwin.detect.__file__).parent
    stamp = json.loads((folder / build.STAMP).read_text())
    assert build.stale(str(folder)) == []
    edited = tmp_path / "detect"
    edited.mkdir()
    for m in build.MODULES:
        text = (folder / f"{m}.py").read_text()
        (edited / f"{m}.py").write_text(text + ("\n# edited\n" if m == "rise" else ""))
        if (folder / f"{m}.pxd").exists():
            (edited / f"{m}.pxd").write_text((folder / f"{m}.pxd").read_text())
    (edited / build.STAMP).write_text(json.dumps(stamp))
    assert build.stale(str(edited)) == ["rise"]


@pytest.mark.parametrize("pure", [False, True])
def test_wtwind_says_once_at_start_which_build_runs(tmp_path, pure):
    """The ``detector_build``, ``ingest_build`` and ``decoder_build`` log events: once
    each, before ``ready``, naming the build loaded."""
    env = {"WTWIN_PURE_PYTHON": "1"} if pure else {}
    with Daemon(extra_env=env, tmpdir=str(tmp_path)) as d:
        events = [json.loads(line) for line in d.log().splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    for name, package in (("detector_build", wtwin.detect), ("ingest_build", wtwin.daemon),
                          ("decoder_build", wtwin.emitters)):
        assert names.count(name) == 1 and names.index(name) < names.index("ready"), name
        (ev,) = [e for e in events if e["event"] == name]
        if pure:
            assert ev["compiled"] is False and "WTWIN_PURE_PYTHON" in ev["build"], name
        else:
            assert ev["compiled"] is package.COMPILED and ev["build"] == package.BUILD, name
