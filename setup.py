"""Builds the compiled detector core: the modules of ``detect/build.py``'s ``MODULES``,
cythonized from their ``.py`` files (pure-Python mode) into C extensions beside them.

Everything else is in pyproject.toml. Without Cython or a C compiler, or when a module
fails to compile, the install goes on with the pure-Python build and says so here (and
``wtwin.detect.BUILD`` / the daemon's ``detector_build`` log event say which one runs).
``WTWIN_NO_COMPILE=1`` skips the compiled build on purpose; ``WTWIN_ANNOTATE=1`` also
writes ``detect/<module>.html`` (``cython -a``: the lines that still call into Python).
"""

from __future__ import annotations

import os
import runpy
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.realpath(__file__))
BUILD = runpy.run_path(os.path.join(HERE, "detect", "build.py"))


def _say(msg: str) -> None:
    print(f"wtwin: {msg}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """All the modules compile, or none is installed (a compiled module imports the C
    types of the others): any failure leaves the pure-Python build."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:       # the modules compile independently: one job per core
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if os.environ.get("WTWIN_NO_COMPILE", "") not in ("", "0"):
            _say("WTWIN_NO_COMPILE is set: pure-Python build")
            return
        try:
            from Cython.Build import cythonize
        except ImportError:
            _say("Cython is not installed: pure-Python build")
            return
        try:
            c_files = {ext.name: ext.sources for ext in cythonize(
                self.extensions, compiler_directives=BUILD["DIRECTIVES"],
                include_path=[self._include_dir()], quiet=True,
                annotate=os.environ.get("WTWIN_ANNOTATE", "") not in ("", "0"))}
            for ext in self.extensions:     # the same objects: setuptools has annotated them
                ext.sources = c_files[ext.name]
            super().run()
        except (Exception, SystemExit) as e:  # noqa: BLE001  (no compiler, or a module failed)
            self._fail(e)
            return
        BUILD["write_stamp"](os.path.dirname(self.get_ext_fullpath(self.extensions[0].name)))
        _say(f"compiled build: {len(self.extensions)} modules of wtwin.detect")

    def build_extensions(self) -> None:
        # No fused multiply-adds: gcc and clang contract a*b+c into one FMA by default where
        # the target has one (arm64: Linux aarch64 and macOS wheels), which rounds once
        # instead of twice and breaks the compiled build's bit-identity with Python.
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off"]
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


setup(
    ext_modules=[Extension(f"wtwin.detect.{m}", [os.path.join("detect", f"{m}.py")])
                 for m in BUILD["MODULES"]],
    cmdclass={"build_ext": OptionalBuildExt},
)
