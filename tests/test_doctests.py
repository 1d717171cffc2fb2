"""The detection library's docstring examples run as tests (seeded, they print the step
at which each detector fires)."""

import doctest
import importlib
import pkgutil

import pytest

import wtwin.detect

MODULES = sorted(m.name for m in pkgutil.iter_modules(wtwin.detect.__path__, "wtwin.detect."))


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    failed, _ = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert failed == 0
