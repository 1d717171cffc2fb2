"""Console-script entry points (``wtwind``, ``wtwin``).

The base install is the emitter only (pyzmq, msgpack). Run from there, either command
says which extra to install, in one line, instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys

# top-level module -> the extra that installs it (pyproject.toml; tests/test_preflight.py
# keeps the two in step). For a module of the daemon's own extras, the daemon's is named.
EXTRAS = {
    "numpy": "daemon", "structlog": "daemon", "aiohttp": "daemon", "prometheus_client": "daemon",
    "tqdm": "daemon", "standardwebhooks": "daemon", "tomli_w": "daemon",
    "matplotlib": "plot", "tensorboard": "tensorboard", "torch": "spectral",
    "weightwatcher": "spectral", "safetensors": "spectral", "threadpoolctl": "spectral",
    "dask": "dask", "distributed": "dask",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that provides the module ``exc`` names, or None for any other module."""
    return EXTRAS.get((exc.name or "").split(".")[0])


def install_hint(exc: ModuleNotFoundError) -> str:
    extra = missing_extra(exc)
    return f"{exc.name} is not installed; pip install 'wtwin[{extra}]'"


def _call(module: str, prog: str) -> int:
    try:
        return importlib.import_module(module).main()
    except ModuleNotFoundError as exc:
        if missing_extra(exc) is None:
            raise
        print(f"{prog}: {install_hint(exc)}", file=sys.stderr)
        return 2


def wtwind() -> int:
    return _call("wtwin.daemon.cli", "wtwind")


def wtwin() -> int:
    return _call("wtwin.offline.cli", "wtwin")
