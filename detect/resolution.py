"""The print resolution of a logged loss: how many decimals the log writes it with.

Most logs round the loss before anyone sees it: Hugging Face's Trainer keeps 4 decimals,
many scripts print ``%.4f`` or ``%.5f``. A rounded loss repeats itself and its
point-to-point scatter stops shrinking once the loss moves less than one printed digit
per point, and a loss that reached 0.0002 or 0.0 stays there: none of that is a frozen
logger or a frozen data loader. The detectors that read repeats or scatter ask this
module how fine the print is.

``decimals(d, x)`` follows a stream: ``d`` is the number of decimals needed so far (`NONE`
before a nonzero finite value), and the result the number ``x`` needs too, up to `RAW`
(more than 9 decimals: the loss is not rounded, as an emitter sends it, and nothing is
asked again). One `round` per point while the log looks rounded, none after.

>>> d = NONE
>>> for x in (2.5, 2.4187, 2.41, 0.0):
...     d = decimals(d, x)
>>> d, quantum(d)
(4, 0.0001)
>>> decimals(d, 2.302585092994046), quantum(RAW)
(10, 0.0)
"""

from __future__ import annotations

try:
    import cython
except ImportError:            # no Cython: the pure build runs (compiled/cython_shim.py)
    from wtwin.compiled import cython_shim as cython
if not cython.compiled:        # compiled: libc's (resolution.pxd)
    from math import isfinite

NONE = -1      # no nonzero finite value seen yet
RAW = 10       # more than 9 decimals: a raw float, not a rounded print

_RAW = cython.declare(cython.longlong, RAW)
# below 2**53: ``x * 10**k`` is within an ulp of the integer a print of ``k`` decimals wrote
_EXACT = cython.declare(cython.double, 9.0e15)


def decimals(d: int, x: float) -> int:
    """The decimals the log needs after ``x``: the larger of ``d`` and the fewest that
    write ``x`` exactly (0.0 and non-finite values say nothing)."""
    if d >= _RAW or x == 0.0 or not isfinite(x):
        return d
    k = d if d > 0 else 0
    while k < _RAW and not _fits(x, k):
        k += 1
    return k


@cython.locals(p=cython.double, y=cython.double, i=cython.longlong)
def _fits(x: float, k: int) -> bool:
    """``round(x, k) == x``: ``x`` is the double a print of ``k`` decimals reads back as.

    Compiled, without the decimal conversion ``round`` makes (two of them a point were
    most of the detectors' cost on a rounded log): ``N = rint(x * 10**k)``, and ``N /
    10**k``, correctly rounded from two exact doubles, is the double nearest the decimal
    ``N / 10**k``, which is ``x`` exactly when ``x`` is that print. Where ``x * 10**k``
    passes 2**53 the product can no longer tell, and ``round`` decides."""
    if cython.compiled:
        p = 1.0
        for i in range(k):
            p *= 10.0                # exact: 10**k, k < 10
        y = x * p
        if -_EXACT < y < _EXACT:
            return rint(y) / p == x  # noqa: F821  (libc's: resolution.pxd)
    return round(x, k) == x


def quantum(d: int) -> float:
    """One printed digit: ``10**-d``; 0.0 when the log is not rounded (or nothing is known)."""
    return 10.0 ** -d if 0 <= d < _RAW else 0.0
