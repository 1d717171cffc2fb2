"""The compiled and the pure-Python build of the daemon's per-event path agree to the bit
(daemon/build.py, docs/COMPILED.md).

The same trainer traffic goes to a real wtwind `Server` (real ROUTER socket, real SQLite
store) once per build, each build in its own process: single-event frames, batches of
loss events (the columns path), a batch of mixed kinds, two runs in one frame,
re-sends (duplicates), a gap the emitter still holds (a nack), a gap it no longer holds,
another client writing to the run (refused), a malformed frame, an eval, a rewind and a
run_end, with snapshot commits (acks) between phases. The clock is fixed per phase so
that times are the same in both processes. Every reply the trainer's DEALER receives
(acks, nacks, errors, alerts), every alert published, the counters, and the stored
snapshot rows, series chunks and alert rows must be identical, byte for byte.

Without a compiled build the compiled side skips; under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys

import pytest

import wtwin.daemon
from helpers import assert_builds_as_asked, run_pure_python
from wtwin.compiled import rules
from wtwin.daemon import build

CI = os.environ.get("CI") == "true"

TRAFFIC = r"""
import asyncio, hashlib, json, math, sqlite3, sys, time
CLOCK = [1.7e9]
time.time = lambda: CLOCK[0]   # one fixed time per phase, set before any module binds time.time
import msgpack, zmq
import wtwin.daemon as daemon
from wtwin.daemon import config as config_mod
from wtwin.daemon.server import Server
from wtwin.emitters import wire

tmp, out_path = sys.argv[1], sys.argv[2]

def loss(run, seq, step, value, em="em-a", **extra):
    return {"v": 1, "type": "loss", "run": run, "seq": seq, "step": step, "loss": value, "lr": 3e-4,
            "emitter": em, **extra}

def curve(t):
    return 2.6 + 9 * t ** -0.35 + 0.02 * math.sin(t * 0.7) + (3.0 if t == 700 else 0.0) \
        + (3e-3 * (t - 1500) if t > 1500 else 0.0)

def phases():
    a = [loss("a", s + 1, s, curve(s)) for s in range(1, 2201)]   # seq 1 is run_start
    start = {"v": 1, "type": "run_start", "run": "a", "seq": 1, "emitter": "em-a", "auth": "s1",
             "config": {"model": "m", "lr": 3e-4}, "kind": "pretraining"}
    yield [wire.encode(start)] + [wire.encode(dict(e, auth="s1")) for e in a[:300]]
    yield [wire.encode_batch(a[i:i + 100], "em-a", base=i + 2, auth="s1") for i in range(300, 1000, 100)]
    yield [wire.encode_batch(a[400:500], "em-a", base=402, auth="s1"),           # a re-send: duplicates
           wire.encode_batch(a[1100:1200], "em-a", base=1002, auth="s1"),        # a held gap: nacked
           wire.encode_batch(a[1000:1100], "em-a", base=1002, auth="s1"),
           wire.encode_batch(a[1000:1050], "em-a", base=1002, auth="s2"),        # not the owner
           b"\x93garbage"]
    b = [loss("b", s, s, 2.0 + 1.0 / s, em="em-b") for s in range(1, 301)]
    mixed = [ev for pair in zip(a[1100:1300], b[:200]) for ev in pair]
    yield [wire.encode(dict(b[0], auth="s1"))] + \
          [wire.encode_batch(mixed[i:i + 80], "em-a", auth="s1") for i in range(0, len(mixed), 80)]
    evs = a[1300:1400] + [{"v": 1, "type": "eval", "run": "a", "seq": 1402, "step": 1399,
                           "metrics": {"val_loss": 2.9}, "emitter": "em-a"},
                          {"v": 1, "type": "heartbeat", "run": "a", "seq": 1403, "emitter": "em-a",
                           "dropped": 3}]
    yield [wire.encode_batch(evs, "em-a", base=1302, auth="s1")]
    tail = [loss("a", s + 3, s, curve(s)) for s in range(1400, 2201)]
    yield [wire.encode_batch(tail[i:i + 100], "em-a", base=2000, auth="s1") for i in range(0, 800, 100)]
    yield [wire.encode_batch(tail[700:800], "em-a", auth="s1"),                 # duplicates again
           wire.encode({"v": 1, "type": "rewind", "run": "a", "seq": 2204, "step": 2000,
                        "from_step": 2200, "emitter": "em-a", "auth": "s1"}),
           wire.encode_batch([loss("a", 2205 + i, 2001 + i, curve(2001 + i)) for i in range(50)],
                             "em-a", base=2150, auth="s1"),                     # a gap no longer held
           wire.encode({"v": 1, "type": "run_end", "run": "a", "seq": 2300, "status": "failed",
                        "emitter": "em-a", "auth": "s1"})]

async def main():
    cfg = config_mod.load(environ={"WTWIND_LISTEN__ENDPOINTS": f"ipc://{tmp}/d.sock",
                                   "WTWIND_HTTP__PORT": "0", "WTWIND_STATE__PATH": f"{tmp}/s.db",
                                   "WTWIND_STATE__FLUSH_INTERVAL_S": "60", "WTWIND_JOBS__ENABLED": "false"})
    server = Server(cfg)
    alerts = []
    server.alert_listeners.append(lambda a: alerts.append(repr(a)))
    await server.startup(asyncio.get_running_loop())
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, b"trainer")
    dealer.connect(f"ipc://{tmp}/d.sock")
    sent = 0
    for frames in phases():
        CLOCK[0] += 60.0
        for f in frames:
            dealer.send(f)
        sent += len(frames)
        deadline = time.monotonic() + 60
        # every frame read, and none of them still in slices (frame_backlog.py)
        while (server.stats.frames < sent or server.receiver.backlog) and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        assert server.stats.frames == sent and not server.receiver.backlog, (server.stats.frames, sent)
        server.snapshots.flush()                                       # commit, then the acks
        await server.store.execute(lambda conn: None, full=False)
        server.store.writer.poll_completed()
    await server.shutdown()
    replies = []
    while dealer.poll(1000):
        replies.append(dealer.recv().hex())
    db = sqlite3.connect(f"{tmp}/s.db")
    rows = lambda q: [[c.hex() if isinstance(c, bytes) else c for c in r] for r in db.execute(q)]
    out = {"compiled": daemon.COMPILED, "build": daemon.BUILD,
           "files": {m: sys.modules["wtwin.daemon." + m].__file__ for m in daemon.build.MODULES},
           "replies": replies, "alerts": alerts,
           "stats": {k: dict(getattr(server.stats, k)) for k in ("received", "dropped", "rejected")},
           "runs": rows("SELECT * FROM runs ORDER BY run"), "series": rows("SELECT * FROM series ORDER BY id"),
           "alert_rows": rows("SELECT * FROM alerts ORDER BY key")}
    with open(out_path, "w") as f:
        json.dump(out, f)

asyncio.run(main())
"""


def _compiled_files() -> bool:
    here = os.path.dirname(wtwin.daemon.__file__)
    import importlib.machinery

    return all(any(os.path.exists(os.path.join(here, m + s)) for s in importlib.machinery.EXTENSION_SUFFIXES)
               for m in build.MODULES)


def _run(tmp, name: str, pure: bool) -> dict:
    folder = tmp / name
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "WTWIN_PURE_PYTHON"}
    if pure:
        env["WTWIN_PURE_PYTHON"] = "1"
    res = subprocess.run([sys.executable, "-c", TRAFFIC, str(folder), str(folder / "out.json")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads((folder / "out.json").read_text())


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """(pure, compiled) results of the same traffic, each build in its own process."""
    if not _compiled_files():
        if CI:
            pytest.fail(f"CI=true but the compiled daemon build is missing: {wtwin.daemon.BUILD}")
        pytest.skip(f"no compiled build here: {wtwin.daemon.BUILD}")
    tmp = tmp_path_factory.mktemp("compiled_daemon")
    return _run(tmp, "pure", True), _run(tmp, "compiled", False)


class TestIdentity:
    def test_each_process_ran_the_build_it_was_asked_for(self, traffic):
        assert_builds_as_asked(*traffic)

    def test_the_traffic_exercises_every_verdict_and_a_refusal(self, traffic):
        pure, _ = traffic
        dropped = pure["stats"]["dropped"]
        assert {"duplicate", "out_of_order", "seq_gap", "not_owner"} <= dropped.keys(), dropped
        assert pure["stats"]["rejected"] and pure["alerts"] and len(pure["runs"]) == 2
        kinds = {wire_type(r) for r in pure["replies"]}
        assert {"ack", "error", "alert"} <= kinds, kinds

    def test_replies_alerts_counters_and_stored_rows_are_identical(self, traffic):
        pure, compiled = traffic
        for key in ("replies", "alerts", "stats", "runs", "series", "alert_rows"):
            assert compiled[key] == pure[key], key


def wire_type(hex_frame: str) -> str:
    import msgpack

    return msgpack.unpackb(bytes.fromhex(hex_frame), raw=False).get("type")


def test_pure_python_env_loads_the_py_files():
    """``WTWIN_PURE_PYTHON=1``: the daemon's per-event path loads from its ``.py`` files."""
    code = ("import wtwin.daemon as d, wtwin.daemon.ingest as i, wtwin.daemon.series as s;"
            "print(d.COMPILED, i.__file__.endswith('.py') and s.__file__.endswith('.py'), d.BUILD)")
    assert run_pure_python(code).startswith("False True pure Python (WTWIN_PURE_PYTHON")


def test_a_source_edited_after_the_build_is_stale(tmp_path):
    """A stamp that does not match the sources: that module is named, the pure build runs."""
    for m in build.MODULES:
        (tmp_path / f"{m}.py").write_text("x = 1\n")
    rules.write_stamp(str(tmp_path), str(tmp_path), build.MODULES)
    assert build.stale(str(tmp_path)) == []
    (tmp_path / "ingest.py").write_text("x = 2\n")
    assert build.stale(str(tmp_path)) == ["ingest"]
    assert build.choose(str(tmp_path))[0] is False


def test_the_daemon_chooses_its_build_by_the_shared_rules(tmp_path, monkeypatch):
    """One choice of build: the daemon's words for a folder are `wtwin.compiled.rules`' for
    its modules, and detect/build.py makes the same choice."""
    monkeypatch.delenv("WTWIN_PURE_PYTHON", raising=False)

    from wtwin.detect import build as detect_build
    (tmp_path / f"ingest{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    why = build.choose(str(tmp_path))
    assert why == rules.choose(str(tmp_path), build.MODULES)
    assert why[0] is False and why[1].startswith("pure Python (compiled build incomplete: no extension "
                                                 "for envelopes, inbound, ingest_marks, run_state, series")
    assert detect_build.choose(str(tmp_path), build.MODULES)[0] is False


def test_a_fallback_says_the_command_that_fixes_it(tmp_path, monkeypatch):
    """Out of date in an installed copy (no setup.py beside it): the pip command, in words;
    in a checkout: `make build`."""
    monkeypatch.delenv("WTWIN_PURE_PYTHON", raising=False)
    installed = tmp_path / "site" / "daemon"
    installed.mkdir(parents=True)
    for m in build.MODULES:
        (installed / f"{m}.py").write_text("x = 1\n")
        (installed / f"{m}{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    rules.write_stamp(str(installed), str(installed), build.MODULES)
    (installed / "series.py").write_text("x = 2\n")
    compiled, why = build.choose(str(installed))
    assert not compiled and "series differ from the sources it was built from" in why
    assert "WTWIN_COMPILE=1 pip install --force-reinstall --no-deps" in why and "make" not in why
    (tmp_path / "site" / "setup.py").write_text("")
    assert "`make build` rebuilds it" in build.choose(str(installed))[1]