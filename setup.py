"""The one build script: compiles, on request, the ``MODULES`` each package's ``build.py``
lists (the detectors, the daemon's per-event path, the fast checks and frame decoder),
by the rules of ``compiled/rules.py``, cythonized
from their ``.py`` files (pure-Python mode) into C extensions beside them, without debug
info.

Everything else is in pyproject.toml. The compiled build is opt-in (docs/INSTALL.md):

- ``WTWIN_COMPILE=1`` in the environment (``make demo``/``make install`` and cibuildwheel
  set it), or a direct ``python setup.py build_ext`` (``make build``): compiled. Through
  pip or ``python -m build``, Cython is then asked for as a build requirement.
- otherwise (``pip install /path/to/wtwin``: the trainer side): a pure wheel
  (``py3-none-any``), nothing compiled, no Cython fetched.

Without Cython or a C compiler, or when a module fails to compile, a requested compiled
build goes on as the pure-Python build and says so here (and ``wtwin.detect.BUILD`` /
the daemon's ``detector_build`` log event say which one runs). ``WTWIN_NO_COMPILE=1``
wins over both; ``WTWIN_ANNOTATE=1`` also writes ``detect/<module>.html`` (``cython
-a``: the lines that still call into Python).
"""

from __future__ import annotations

import ast
import os
import runpy
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.realpath(__file__))
# The rules every compiled package shares (stdlib only: run from its path, as nothing of
# wtwin is importable before it is built).
RULES = runpy.run_path(os.path.join(HERE, "compiled", "rules.py"))


def modules_of(folder: str) -> tuple[str, ...]:
    """``MODULES`` of ``<folder>/build.py``, read without running it (it imports wtwin)."""
    with open(os.path.join(HERE, folder, "build.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit(f"setup.py: {folder}/build.py has no MODULES")


# package -> (its folder here, its compiled modules): the detectors, the daemon's
# per-event path, and the fast checks and frame decoder
PACKAGES = {package: (folder, modules_of(folder)) for package, folder in (
    ("wtwin.detect", "detect"), ("wtwin.daemon", "daemon"), ("wtwin.emitters", "emitters"))}


def _say(msg: str) -> None:
    print(f"wtwin: {msg}", file=sys.stderr)


def _on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


class PureBuildPy(build_py):
    """The ``.pxd`` declarations are inputs of the compiled build only: a pure wheel (the
    trainer side) leaves them out."""

    def find_data_files(self, package, src_dir):
        files = super().find_data_files(package, src_dir)
        return files if COMPILE else [f for f in files if not f.endswith(".pxd")]


# `setup.py build_ext` run by hand (`make build`); under pip or `python -m build` the
# command is bdist_wheel, editable_wheel, sdist or egg_info
BY_HAND = "build_ext" in sys.argv[1:]
COMPILE = not _on("WTWIN_NO_COMPILE") and (_on("WTWIN_COMPILE") or BY_HAND)
# no debug info (the trainer never loads it; -g made the .so files 5.3x bigger and 1.4x slower
# to build); stripped at link where the linker takes -s
CFLAGS = ["-g0"]
LDFLAGS = ["-g0", "-s"] if sys.platform.startswith("linux") else ["-g0"]


class OptionalBuildExt(build_ext):
    """All the modules compile, or none is installed (a compiled module imports the C
    types of the others): any failure leaves the pure-Python build."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:       # the modules compile independently: one job per core
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if not self.extensions:
            return
        try:
            from Cython.Build import cythonize
        except ImportError:
            _say("Cython is not installed: pure-Python build")
            return
        try:
            c_files = {ext.name: ext.sources for ext in cythonize(
                self.extensions, compiler_directives=RULES["DIRECTIVES"],
                include_path=[self._include_dir()], quiet=True, nthreads=int(self.parallel),
                annotate=_on("WTWIN_ANNOTATE"))}
            for ext in self.extensions:     # the same objects: setuptools has annotated them
                ext.sources = c_files[ext.name]
            super().run()
        except (Exception, SystemExit) as e:  # noqa: BLE001  (no compiler, or a module failed)
            self._fail(e)
            return
        for package, (folder, modules) in PACKAGES.items():
            first = next(e for e in self.extensions if e.name.startswith(package + "."))
            RULES["write_stamp"](os.path.dirname(self.get_ext_fullpath(first.name)),
                                 os.path.join(HERE, folder), modules)
        _say(f"compiled build: {len(self.extensions)} modules of {' and '.join(PACKAGES)}")

    def build_extensions(self) -> None:
        # No fused multiply-adds: gcc and clang contract a*b+c into one FMA by default where
        # the target has one (arm64: Linux aarch64 and macOS wheels), which rounds once
        # instead of twice and breaks the compiled build's bit-identity with Python.
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off", *CFLAGS]
                ext.extra_link_args = [*ext.extra_link_args, *LDFLAGS]
        super().build_extensions()

    def _include_dir(self) -> str:
        """Cython finds the ``.pxd`` of ``wtwin.detect.X`` (the modules' relative cimports)
        under ``<dir>/wtwin/detect/``: here that is a link to this checkout."""
        inc = os.path.join(HERE, "build", "cython-include")
        os.makedirs(inc, exist_ok=True)
        link = os.path.join(inc, "wtwin")
        if os.path.realpath(link) != HERE:
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(HERE, link)
        return inc

    def _fail(self, err: BaseException) -> None:
        for ext in self.extensions:
            path = self.get_ext_fullpath(ext.name)
            if os.path.exists(path):
                os.remove(path)
        _say(f"the compiled build failed ({type(err).__name__}: {err}); "
             "installing the pure-Python build")


if not COMPILE and not _on("WTWIN_NO_COMPILE") and {"bdist_wheel", "editable_wheel"} & set(sys.argv):
    _say("pure-Python build (WTWIN_COMPILE=1 compiles the detector core: docs/INSTALL.md)")
elif _on("WTWIN_NO_COMPILE"):
    _say("WTWIN_NO_COMPILE is set: pure-Python build")

setup(
    ext_modules=[Extension(f"{package}.{m}", [os.path.join(folder, f"{m}.py")])
                 for package, (folder, modules) in PACKAGES.items() for m in modules] if COMPILE else [],
    # through pip or `python -m build` (PEP 517), setuptools hands this to the frontend as
    # a build requirement of this build only; by hand, Cython is the caller's (`[dev]`)
    setup_requires=["Cython>=3.1"] if COMPILE and not BY_HAND else [],
    cmdclass={"build_ext": OptionalBuildExt, "build_py": PureBuildPy},
)
