"""Argument checks shared by the library, the integrator and the reference.

Every function turns a user's value into the array or number the caller works with, or
raises :class:`~sapporo.errors.InputError` with a message that starts with the argument's
name. They never let numpy coerce silently: complex numbers, text, booleans and objects are
refused where numbers are expected, ragged lists are refused, and integers are range-checked
in their own type before any conversion (so a huge float or uint64 is reported as given).

Small inputs (block steps of a few particles are the common case) are checked in Python
floats and ints, where a numpy reduction would cost more than the check.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from sapporo.core import layout
from sapporo.errors import InputError

__all__ = ["COORD_LIMIT", "all_finite", "int_arg", "ints", "positive", "real_array", "scalar",
           "scalars", "vec3"]

#: arrays up to this size are checked in Python floats (a numpy reduction costs ~1.5 us)
SMALL = 48
_F64 = np.dtype(np.float64)
#: coordinates at or beyond this magnitude are refused where r^2 is formed in double:
#: (2 * 1e150)^2 * 3 is still finite, 1e155^2 is not
COORD_LIMIT = layout.COORD_LIMIT


def all_finite(arr: np.ndarray) -> bool:
    """Whether every element of a float array is finite.

    Small arrays: a finite sum in Python floats means finite terms, and only an infinite
    or NaN sum (a non-finite term, or an overflow) looks at the elements. Larger ones:
    ``np.isfinite`` (a numpy sum would warn on overflow, and silencing it costs as much as
    the test).
    """
    if arr.size <= SMALL:
        return math.isfinite(sum(arr.ravel().tolist())) or bool(np.isfinite(arr).all())
    return bool(np.isfinite(arr).all())


def _asarray(name: str, value: Any, what: str) -> np.ndarray:
    """``np.asarray(value)``, with ragged or otherwise unconvertible input as InputError."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{name}: expected {what}") from None
    if arr.dtype.kind == "O":
        raise InputError(f"{name}: expected {what} (got objects or a ragged list)")
    return arr


def real_array(name: str, value: Any, what: str) -> np.ndarray:
    """``value`` as a float64 array: integers are fine; complex numbers, strings, booleans
    and objects are not (numpy would drop imaginary parts or parse text silently)."""
    arr = _asarray(name, value, what)
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{name}: expected {what} of real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    return arr if arr.flags.c_contiguous else arr.copy()  # (a strided view: copied)


def int_arg(name: str, value: Any, lo: int, hi: int, note: str = "") -> int:
    """An integer argument in [lo, hi]: ints, or floats with an integral value (``note``:
    what the range is, for the message). Booleans and text are refused."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise InputError(f"{name}: expected an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            f = math.nan
        if not (math.isfinite(f) and f == math.floor(f)):
            raise InputError(f"{name}: expected an integer, got {value!r}") from None
        v = int(f)
    if not lo <= v <= hi:
        raise InputError(f"{name}: {v} outside [{lo}, {hi}]{note}")
    return v


def vec3(name: str, value: Any, n: int | None, limit: float | None = None) -> np.ndarray:
    """A finite (n, 3) float64 array (a single (3,) vector when ``n`` is None or 1).

    ``limit``: refuse components whose magnitude reaches it (see :data:`COORD_LIMIT`).
    """
    if (type(value) is np.ndarray and value.dtype == _F64 and value.ndim == 2
            and value.size <= SMALL and value.shape[1] == 3
            and (n is None or value.shape[0] == n) and value.flags.c_contiguous):
        # the frequent case (a block step's few particles): one pass in Python floats
        vals = value.ravel().tolist()
        if vals and math.isfinite(sum(vals)) and (
                limit is None or -limit < min(vals) and max(vals) < limit):
            return value
    arr = real_array(name, value, "an array of shape (n, 3)")
    if arr.ndim == 1 and arr.shape == (3,) and n in (None, 1):
        arr = arr.reshape(1, 3)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise InputError(f"{name}: expected shape (n, 3), got {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{name}: expected {n} rows, got {arr.shape[0]}")
    if not all_finite(arr):
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise InputError(f"{name}: non-finite value in row {bad}: {arr[bad].tolist()}")
    if limit is not None and arr.size:
        big = (max(map(abs, arr.ravel().tolist())) if arr.size <= SMALL
               else float(np.abs(arr).max()))
        if big >= limit:
            bad = int(np.flatnonzero((np.abs(arr) >= limit).any(axis=1))[0])
            raise InputError(f"{name}: value in row {bad} too large ({arr[bad].tolist()}): "
                             "squared distances would overflow double; magnitudes must stay "
                             f"below {limit:g}")
    return np.ascontiguousarray(arr)


def ints(name: str, value: Any, n: int | None, lo: int, hi: int) -> np.ndarray:
    """A 1-D int64 array of values in [lo, hi] (a scalar becomes one value). Integral
    floats are accepted; the range is checked before any conversion, so a value that does
    not fit int64 is reported as given."""
    if (type(value) is np.ndarray and value.dtype.kind == "i" and value.ndim == 1
            and value.size <= SMALL and (n is None or value.shape[0] == n) and value.size
            and value.flags.c_contiguous):
        vals = value.tolist()  # the frequent case: a few signed integers in range
        if lo <= min(vals) and max(vals) <= hi:
            return value.astype(np.int64, copy=False)
    arr = _asarray(name, value, "integers")
    if not arr.flags.c_contiguous:  # (a strided view: copied)
        arr = arr.copy()
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise InputError(f"{name}: expected a 1-D array of integers, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{name}: expected {n} values, got {arr.shape[0]}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    kind = arr.dtype.kind
    if kind == "f":
        bad = arr[~(np.isfinite(arr) & (arr == np.round(arr)))]
        if bad.size:
            raise InputError(f"{name}: expected integers, got {bad[0].item()!r}")
    elif kind not in "iu":
        raise InputError(f"{name}: expected integers, got dtype {arr.dtype}")
    if arr.size <= SMALL:  # Python numbers: a numpy min and max cost ~3 us
        vals = arr.tolist()
        if min(vals) < lo or max(vals) > hi:
            bad = next(x for x in vals if not lo <= x <= hi)
            raise InputError(f"{name}: value {_fmt(bad)} outside [{lo}, {hi}]")
        return arr.astype(np.int64, copy=False)
    if kind == "u":
        out = bool(arr.max() > hi) or lo > 0 and bool(arr.min() < lo)
    else:
        out = bool(arr.min() < lo) or bool(arr.max() > hi)
    if out:
        bad = arr[(arr < lo) | (arr > hi)][0]
        raise InputError(f"{name}: value {_fmt(bad.item())} outside [{lo}, {hi}]")
    return arr.astype(np.int64, copy=False)


def _fmt(v: int | float) -> str:
    """A value for a message: integral floats as integers (1e20 -> 100000000000000000000)."""
    if isinstance(v, float) and math.isfinite(v) and v == math.floor(v):
        return str(int(v))
    return str(v)


def scalars(name: str, value: Any, n: int, nonneg: bool = False) -> np.ndarray:
    """A finite (n,) float64 array from a number or an array of n numbers."""
    if type(value) is float and n <= SMALL:  # the frequent case: one number for all
        if math.isfinite(value) and not (nonneg and value < 0):
            return np.full(n, value)
    arr = real_array(name, value, f"a number or an array of {n} numbers")
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise InputError(f"{name}: expected a scalar or shape ({n},), got {arr.shape}")
    if not all_finite(arr):
        bad = int(np.argmin(np.isfinite(arr)))
        raise InputError(f"{name}: non-finite value at position {bad}")
    if nonneg and (arr < 0).any():
        raise InputError(f"{name}: negative value at position {int(np.argmax(arr < 0))}")
    return arr


def scalar(name: str, value: Any, nonneg: bool = False) -> float:
    """A finite real number: ints and floats (numpy's too). Text, booleans, complex
    numbers and values beyond float's range are refused."""
    if isinstance(value, (bool, np.bool_, str, bytes, complex, np.complexfloating)):
        raise InputError(f"{name}: expected a real number, got {value!r}")
    if isinstance(value, np.ndarray):
        if value.ndim != 0 or value.dtype.kind not in "fiu":
            raise InputError(f"{name}: expected a real number, got {value!r}")
        value = value.item()
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a number, got {value!r}") from None
    except OverflowError:
        raise InputError(f"{name}: {value!r} is beyond double's range") from None
    if not math.isfinite(v):
        raise InputError(f"{name}: non-finite value {v}")
    if nonneg and v < 0:
        raise InputError(f"{name}: must be >= 0, got {v}")
    return v


def positive(name: str, value: Any) -> float:
    """A finite number > 0."""
    v = scalar(name, value)
    if not v > 0.0:
        raise InputError(f"{name}: must be > 0, got {v}")
    return v
