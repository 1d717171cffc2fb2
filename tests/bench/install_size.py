"""Install size of what a trainer installs: the base wheel (emitter) against the
dependencies every install pulled before the split (e1706d8: numpy, scipy, aiohttp,
structlog, prometheus-client), and `wtwin[daemon]`.

    .venv/bin/python tests/bench/install_size.py

Each variant is a fresh venv; its size is its site-packages less an empty venv's (pip).
Packages come from the configured index (pip's own config), so figures are of the wheels
that index serves for this Python and platform.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BEFORE = ["pyzmq>=25", "msgpack>=1.0", "numpy>=1.24", "scipy>=1.10", "prometheus-client>=0.19",
          "structlog>=23.1", "aiohttp>=3.9"]


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _venv(tmp: Path, name: str, *installs: list[str]) -> tuple[int, int]:
    venv = tmp / name
    _sh(sys.executable, "-m", "venv", str(venv))
    (site,) = venv.glob("lib/python*/site-packages")
    for args in installs:
        _sh(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args)
    n = sum(1 for p in site.glob("*.dist-info"))
    return _size(site), n


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = tmp / "src"
        shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "tmp", "out"))
        _sh(sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "dist"), str(src))
        (whl,) = (tmp / "dist").glob("wtwin-*.whl")
        empty, n0 = _venv(tmp, "empty")
        rows = [
            ("base: wtwin (emitter; pyzmq, msgpack)", _venv(tmp, "base", [str(whl)])),
            ("wtwin[daemon]", _venv(tmp, "daemon", [f"{whl}[daemon]"])),
            ("before the split (e1706d8's base deps)", _venv(tmp, "before", ["--no-deps", str(whl)], BEFORE)),
        ]
    print(f"{'install':<42} {'MB':>7} {'dists':>5}")
    for name, (size, n) in rows:
        print(f"{name:<42} {(size - empty) / 1e6:7.1f} {n - n0:5d}")
    base, before = rows[0][1][0] - empty, rows[2][1][0] - empty
    print(f"base / before: {base / before:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
