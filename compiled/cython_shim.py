"""What ``import cython`` gives the detectors when Cython is not installed: the pure build.

Every compiled module (the ``MODULES`` of detect/, daemon/ and emitters/``build.py``)
starts with::

    try:
        import cython
    except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
        from wtwin.compiled import cython_shim as cython

Cython's compiler turns the line ``import cython`` into its compile-time module wherever it
stands, so the compiled module never runs either branch; the ``except`` branch only
runs in the pure build without Cython (a user's ``pip install`` without a compiler). With
Cython installed, the pure build gets Cython's own stand-in (``Cython.Shadow``); both
make every decorator a no-op and every type a Python type. Only the names the detectors
use are here: a name missing is an AttributeError at import, and
``tests/test_compiled_core.py`` checks that every ``cython.X`` of a compiled module is one.
"""

from __future__ import annotations

import builtins

compiled = False


def _same(x):
    return x


def _directive(*_args, **_kw):
    return _same


# class and function decorators: no-ops in Python
cclass = cfunc = ccall = inline = final = _same
# decorators that take arguments: no-ops too
locals = returns = exceptval = annotation_typing = cdivision = boundscheck = wraparound = \
    nonecheck = initializedcheck = infer_types = overflowcheck = profile = cpow = _directive

# C types: the Python type each one holds
double = float
bint = bool
int = long = longlong = Py_ssize_t = size_t = builtins.int


def declare(t=None, value=None, **_kw):
    """``x = cython.declare(cython.double, 1.0)`` is ``x = 1.0`` in Python."""
    return value


def cast(t, value, **_kw):
    """A C cast is the value itself in Python."""
    return value


def address(value):
    """``&value``: only read in ``if cython.compiled:`` branches (emitters/fast_decode.py);
    the pure build never takes them."""
    return value
