"""The distribution as users get it: ``python -m build``, then the wheel's base install.

The base install is the trainer side only (pyzmq, msgpack): ``python -m build --wheel``
(what ``pip install /path/to/wtwin`` runs) gives a pure wheel, nothing compiled; a fresh
venv with it (``--no-deps``) plus those two imports ``wtwin.emitters`` and streams a run
to a real wtwind; the console scripts there name the extra to install instead of a
traceback.

``WTWIN_COMPILE=1`` (the daemon installs, cibuildwheel) gives the binary wheel: the
compiled detector core without debug info, which installs offline (``pip install
--no-index``) and loads compiled in a venv without Cython; a build without a C compiler
succeeds with the pure-Python core (docs/COMPILED.md, docs/INSTALL.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import REPO, Daemon, wait_for

pytestmark = pytest.mark.slow

COPY_IGNORE_NAMES = (".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                     ".hypothesis", "*.db*", "out", "tmp",
                     "*.so", "*.c", "_compiled.json")   # the in-place compiled build
COPY_IGNORE = shutil.ignore_patterns(*COPY_IGNORE_NAMES)
VENDORED = ("uPlot.",)   # daemon/web/static: third-party, shipped as released
HEAVY = ("numpy", "scipy", "structlog", "aiohttp", "prometheus_client", "torch")

EMIT = textwrap.dedent("""
    import importlib.util, json, sys
    import wtwin.emitters
    emit = wtwin.emitters.connect(sys.argv[1], run="from-the-wheel")
    for step in range(1, 51):
        emit.loss(step, 3.0 / step ** 0.3, lr=1e-3)
    ok = emit.flush(20.0)
    emit.close()
    heavy = [m for m in %r if importlib.util.find_spec(m) is not None]
    print(json.dumps({"flushed": ok, "stats": emit.stats, "heavy": heavy,
                      "loaded": sorted(m for m in sys.modules if m.split(".")[0] in %r)}))
""" % (HEAVY, HEAVY))


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def _build_wheel(tmp: Path, **env) -> Path:
    """``python -m build --wheel`` of a copy of the checkout (the checkout stays clean)."""
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=COPY_IGNORE)
    env = {k: v for k, v in os.environ.items() if k not in ("WTWIN_COMPILE", "WTWIN_NO_COMPILE")} | env
    res = _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "dist"), str(src)],
               env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout + res.stderr
    for word in ("Deprecat", "BuildBackendWarning", "SetuptoolsWarning"):
        assert word not in out, f"setuptools warns ({word}):\n{out[-4000:]}"
    (whl,) = (tmp / "dist").glob("wtwin-*.whl")
    return whl


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel ``pip install /path/to/wtwin`` builds: no environment variable set."""
    return _build_wheel(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def compiled_wheel(tmp_path_factory) -> Path:
    """The binary wheel: ``WTWIN_COMPILE=1``, as cibuildwheel and the Makefile set it."""
    return _build_wheel(tmp_path_factory.mktemp("build-compiled"), WTWIN_COMPILE="1")


@pytest.fixture(scope="module")
def base_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv: the wheel with --no-deps, then pyzmq and msgpack, nothing else."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for args in ([*pip, "--no-deps", str(wheel)], [*pip, "pyzmq", "msgpack"]):
        res = _run(args)
        assert res.returncode == 0, res.stderr[-3000:]
    return venv


class TestWheel:
    def test_the_base_wheel_is_pure_and_small(self, wheel):
        """Nothing compiled (py3-none-any, no extension), at most 1.5 MB of our own code
        (1.30 MB on 2026-12-07: docs/INSTALL.md). The bound
        catches an accident (a data file, a vendored library), not growth line by line."""
        import zipfile

        assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
        with zipfile.ZipFile(wheel) as z:
            infos = z.infolist()
        assert not [i.filename for i in infos if i.filename.endswith((".so", ".pyd", ".c"))]
        # our own code: not the wheel's metadata, not the vendored third-party chart library
        # (uPlot, MIT: 0.05 MB of the web page's static files)
        ours = sum(i.file_size for i in infos if not i.filename.startswith("wtwin-")
                   and not i.filename.rpartition("/")[2].startswith(VENDORED))
        assert ours <= 1_500_000, f"{ours / 1e6:.2f} MB of our own code in the base wheel"

    def test_metadata_base_is_the_emitter_only(self, wheel):
        """The wheel requires pyzmq and msgpack and nothing else outside an extra."""
        import zipfile

        with zipfile.ZipFile(wheel) as z:
            meta = z.read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA").decode()
            names = z.namelist()
        base = [line.split(":", 1)[1].strip() for line in meta.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
        assert sorted(d.split(">")[0].split("=")[0] for d in base) == ["msgpack", "pyzmq"]
        extras = {line.split(":", 1)[1].strip() for line in meta.splitlines()
                  if line.startswith("Provides-Extra:")}
        assert {"daemon", "spectral", "dask", "hf", "lightning", "wandb", "plot", "dev"} <= extras
        assert "License-Expression: Apache-2.0" in meta
        assert "wtwin/daemon/web/static/index.html" in names  # package data travels

    def test_fresh_venv_imports_the_emitter_and_streams_to_wtwind(self, base_venv, tmp_path):
        """With only pyzmq and msgpack, a run streams to a real wtwind and is acked."""
        with Daemon(tmpdir=str(tmp_path)) as d:
            res = _run([str(base_venv / "bin" / "python"), "-c", EMIT, d.tcp])
            assert res.returncode == 0, res.stderr[-3000:]
            out = json.loads(res.stdout.strip().splitlines()[-1])
            assert out["heavy"] == [] and out["loaded"] == []
            assert out["flushed"] is True
            assert out["stats"]["acked"] >= 51 and out["stats"]["dropped"] == 0
            wait_for(lambda: _received(d) >= 50, 10, what="the run's 50 losses at wtwind")

    def test_console_scripts_name_the_missing_extra(self, base_venv, tmp_path):
        """`wtwind` and `wtwin monitor` without the daemon extra: one line, exit 2."""
        log = tmp_path / "log.csv"
        log.write_text("step,loss\n1,2.0\n2,1.9\n")
        env = dict(os.environ, PATH=f"{base_venv / 'bin'}:{os.environ['PATH']}")
        for cmd in (["wtwind", "--check"], ["wtwin", "monitor", str(log)]):
            res = _run([str(base_venv / "bin" / cmd[0]), *cmd[1:]], env=env, cwd=tmp_path)
            assert res.returncode == 2, (cmd, res.stdout, res.stderr)
            assert "Traceback" not in res.stderr
            assert "pip install 'wtwin[daemon]'" in res.stderr, res.stderr


DETECT = textwrap.dedent("""
    import importlib.util, json, random
    import wtwin.detect as d
    from wtwin.detect.replay import alerts
    rng = random.Random(0)
    events = [("loss", t, 2.6 + 9 * t ** -0.35 + rng.gauss(0, 0.05)
               + (1e-3 * (t - 5000) if t > 5000 else 0.0), None) for t in range(1, 8001)]
    print(json.dumps({"compiled": d.COMPILED, "build": d.BUILD,
                      "cython": importlib.util.find_spec("cython") is not None,
                      "alerts": [[a.kind, a.severity, a.status, a.step] for a in alerts(events)]}))
""")
# replay.py's doctest: the same run, the same alerts in either build
ALERTS = [["drift", "info", "firing", 5113], ["drift", "warning", "firing", 5135],
          ["drift", "critical", "firing", 5879], ["divergence", "critical", "firing", 6377]]


def _compiler() -> bool:
    return any(shutil.which(c) for c in ("cc", "gcc", "clang"))


def _detect_venv(wheel: Path, venv: Path) -> Path:
    """A fresh venv with what `wtwin.detect` imports (msgpack, numpy) and the base
    install's pyzmq, then the wheel offline (``--no-index``: nothing to build or fetch):
    no Cython."""
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for args in ([*pip, "msgpack", "numpy", "pyzmq"], [*pip, "--no-index", str(wheel)]):
        res = _run(args)
        assert res.returncode == 0, res.stderr[-3000:]
    return venv


def _replay(venv: Path, **env) -> dict:
    res = _run([str(venv / "bin" / "python"), "-c", DETECT], env={**os.environ, **env},
               cwd=venv)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


class TestCompiledCore:
    def test_wheel_holds_the_compiled_core(self, compiled_wheel):
        """Built with a compiler: every module of `build.MODULES` is an extension in the
        wheel, beside its .py, with the digest of the sources it was built from, and no
        debug info."""
        import importlib.machinery
        import zipfile

        from wtwin.detect.build import MODULES, STAMP

        if not _compiler():
            pytest.skip("no C compiler here: the wheel is the pure build")
        with zipfile.ZipFile(compiled_wheel) as z:
            names = set(z.namelist())
            suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
            for m in MODULES:
                (ext,) = [n for n in names if n.startswith(f"wtwin/detect/{m}.") and n.endswith(suffixes)]
                assert f"wtwin/detect/{m}.py" in names
                assert b".debug_info" not in z.read(ext), f"{ext} carries debug info"
        assert f"wtwin/detect/{STAMP}" in names and "wtwin/detect/base.pxd" in names
        # every compiled package's declarations: without them its stamp does not match
        for package in ("daemon", "emitters"):
            folder = REPO / package
            assert {f"wtwin/{package}/{p.name}" for p in folder.glob("*.pxd")} <= names, package
            assert f"wtwin/{package}/{STAMP}" in names, package
        assert not any(n.endswith(".c") for n in names)
        assert not compiled_wheel.name.endswith("-none-any.whl"), compiled_wheel.name

    def test_compiled_and_pure_wheel_builds_give_the_same_alerts_without_cython(
            self, compiled_wheel, tmp_path_factory):
        """Installed offline in a venv without Cython the wheel runs compiled, and with
        WTWIN_PURE_PYTHON=1 the pure build runs on the shim: the same alerts."""
        venv = _detect_venv(compiled_wheel, tmp_path_factory.mktemp("detect") / "v")
        compiled, pure = _replay(venv), _replay(venv, WTWIN_PURE_PYTHON="1")
        assert compiled["cython"] is False and pure["cython"] is False
        assert compiled["compiled"] is _compiler(), compiled["build"]
        assert pure["compiled"] is False and "WTWIN_PURE_PYTHON" in pure["build"]
        assert compiled["alerts"] == pure["alerts"] == ALERTS

    def test_without_a_compiler_the_install_is_the_pure_build(self, tmp_path_factory):
        """``WTWIN_COMPILE=1 CC=false``: the compiled build fails, the wheel still builds, with no
        extension in it, and installs as the pure build that says why."""
        import zipfile

        tmp = tmp_path_factory.mktemp("nocc")
        src = tmp / "src"
        shutil.copytree(REPO, src, ignore=COPY_IGNORE)
        # isolated, as pip builds: the venv's own setuptools may be older than the build's
        res = _run([sys.executable, "-m", "build", "--wheel", "--outdir",
                    str(tmp / "dist"), str(src)], env=dict(os.environ, CC="false", WTWIN_COMPILE="1"))
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert "installing the pure-Python build" in res.stdout + res.stderr
        (whl,) = (tmp / "dist").glob("wtwin-*.whl")
        with zipfile.ZipFile(whl) as z:
            names = z.namelist()
        assert "wtwin/detect/spike.py" in names
        assert not any(n.startswith("wtwin/detect/") and n.endswith(".so") for n in names)
        out = _replay(_detect_venv(whl, tmp / "v"))
        assert out["compiled"] is False and "not compiled" in out["build"]
        assert out["alerts"] == ALERTS


BUILD_EVENTS = ("detector_build", "ingest_build", "decoder_build")


def _daemon_venv(target: str, venv: Path, **env) -> Path:
    """A fresh venv with ``pip install '<target>[daemon]'``, as a user installs the daemon
    (its dependencies from the configured index)."""
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    res = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{target}[daemon]"],
               env={**os.environ, **env})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return venv


def _build_lines(venv: Path) -> dict:
    """wtwind started from ``venv``: its build log events by name."""
    with Daemon(python=str(venv / "bin" / "python")) as d:
        events = [json.loads(line) for line in d.log().splitlines() if line.startswith("{")]
    return {e["event"]: e for e in events if e.get("event") in BUILD_EVENTS}


def _site(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


class TestDaemonInstall:
    """``WTWIN_COMPILE=1 pip install '.[daemon]'``, from a checkout and from the built
    wheel: wtwind says every compiled package runs compiled."""

    def test_from_the_compiled_wheel_every_build_line_says_compiled(self, compiled_wheel,
                                                                   tmp_path_factory):
        if not _compiler():
            pytest.skip("no C compiler here: the wheel is the pure build")
        lines = _build_lines(_daemon_venv(str(compiled_wheel), tmp_path_factory.mktemp("dw") / "v"))
        assert set(lines) == set(BUILD_EVENTS)
        assert {e["event"]: (e["compiled"], e["build"]) for e in lines.values()} == {
            name: (True, "compiled (Cython)") for name in BUILD_EVENTS}

    def test_from_a_checkout_every_build_line_says_compiled(self, tmp_path_factory):
        if not _compiler():
            pytest.skip("no C compiler here: the install is the pure build")
        tmp = tmp_path_factory.mktemp("dc")
        shutil.copytree(REPO, tmp / "src", ignore=COPY_IGNORE)
        venv = _daemon_venv(str(tmp / "src"), tmp / "v", WTWIN_COMPILE="1")
        lines = _build_lines(venv)
        assert {e["event"]: e["compiled"] for e in lines.values()} == dict.fromkeys(BUILD_EVENTS, True)
        # a declaration gone from the install: the pure build, and why, and the pip command
        (_site(venv) / "wtwin" / "daemon" / "series.pxd").unlink()
        line = _build_lines(venv)["ingest_build"]
        assert line["compiled"] is False
        assert "series differ from the sources it was built from" in line["build"]
        assert "WTWIN_COMPILE=1 pip install --force-reinstall --no-deps" in line["build"]
        assert "make" not in line["build"]


def _received(d) -> float:
    m = d.metrics()
    return sum(v for (name, labels), v in m.items()
               if name == "wtwind_events_received_total" and ("type", "loss") in labels)
