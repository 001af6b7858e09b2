"""exp, log, power and geomspace over numpy arrays, with the same bits on every processor.

numpy picks its loops for exp, log and power per processor when it is imported: on a processor
with AVX-512 they are numpy's own vectorised approximations (tested here on an Intel Xeon: about
one exp in twenty differs from the C library's in the last bit), elsewhere the C library's. A
simulation whose policy resizes dozens of jobs on fitted models turns last bits into other
decisions: before this module the same trace gave `goodput` 2,121 s of average JCT on that Xeon
and 2,172 s on an AMD EPYC (AVX2), or on the Xeon with numpy's AVX-512 loops turned off
(`NPY_DISABLE_CPU_FEATURES`). These functions call Python's `math` (the C library) element by
element instead: about 70 ns an element, on the tens to hundreds of elements a fit or a speed-up
curve needs. Addition, multiplication, division and square roots are exactly rounded (IEEE 754)
whatever the vector width, and numpy's sums add pairwise in a fixed order: those stay numpy's.
tests/test_reproducible_numerics.py runs a fit and a simulation with numpy's per-processor loops
and without them and compares the results exactly.

Out of domain they answer as numpy does, without its warnings: inf on overflow, -inf for
log(0), nan for the log of a negative number.
"""

from __future__ import annotations

import math

import numpy as np


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _log(x: float) -> float:
    if x > 0.0:
        return math.log(x)
    return -math.inf if x == 0.0 else math.nan


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:
        return math.inf
    except ValueError:  # 0 to a negative power: inf; a negative number to a fraction: nan
        return math.inf if x == 0.0 else math.nan


# Each as (fast, careful): in the domain (all a fit and a speed-up curve need) `math`'s own
# functions, without a Python frame per element (3x faster); out of it they raise, and the
# careful versions above answer.
_EXP = np.frompyfunc(math.exp, 1, 1), np.frompyfunc(_exp, 1, 1)
_LOG = np.frompyfunc(math.log, 1, 1), np.frompyfunc(_log, 1, 1)
_POW = np.frompyfunc(math.pow, 2, 1), np.frompyfunc(_pow, 2, 1)


def _apply(funcs, *args) -> np.ndarray:
    fast, careful = funcs
    xs = [np.asarray(a, dtype=float) for a in args]
    try:
        out = fast(*xs)
    except (OverflowError, ValueError):
        out = careful(*xs)
    return np.asarray(out, dtype=float)


def exp(x) -> np.ndarray:
    """e ** x, elementwise (float array; a 0-d array for a scalar)."""
    return _apply(_EXP, x)


def log(x) -> np.ndarray:
    """The natural logarithm, elementwise."""
    return _apply(_LOG, x)


def power(x, y) -> np.ndarray:
    """x ** y, elementwise (broadcast)."""
    return _apply(_POW, x, y)


def geomspace(start: float, stop: float, num: int) -> np.ndarray:
    """`num` numbers from `start` to `stop` (both included), evenly spaced on a log scale:
    `numpy.geomspace` for positive bounds, computed as numpy does (powers of ten of a linear
    space of exponents) with the C library's log10 and pow."""
    if num == 1:
        return np.array([float(start)])
    lo, hi = math.log10(start), math.log10(stop)
    step = (hi - lo) / (num - 1)
    out = [_pow(10.0, i * step + lo) for i in range(num - 1)] + [_pow(10.0, hi)]
    out[0], out[-1] = float(start), float(stop)
    return np.array(out)
