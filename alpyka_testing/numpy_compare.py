"""A kernel against numpy, as cupy.testing compares cupy with numpy: dtype parametrisations by
group (``for_all_dtypes``, ``for_float_dtypes``, ``for_int_dtypes``) and one comparison of a
kernel's output with a numpy function's on the backend under test, with a tolerance per class of
operation (``TOLERANCES``).

    @for_float_dtypes()
    def test_mul_add(queue, dtype):
        xs = [np.arange(100, dtype=dtype)] * 3
        assert_kernel_matches_numpy(queue, mul_add, lambda x, y, z: x * y + z, *xs)

The kernel takes ``(acc, *inputs, out, n)`` (``out_first=True``: ``(acc, out, *inputs, n)``),
``n`` the length of the first input; ``out`` has the shape and dtype of numpy's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import portable as pk

from .kernels import download, upload

FLOAT_DTYPES = (np.float32, np.float64)
SIGNED_DTYPES = (np.int8, np.int16, np.int32, np.int64)
UNSIGNED_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
INT_DTYPES = SIGNED_DTYPES + UNSIGNED_DTYPES
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES


def for_dtypes(dtypes: Sequence[Any], name: str = "dtype") -> pytest.MarkDecorator:
    """Parametrise argument ``name`` over ``dtypes`` (test ids: the dtypes' names)."""
    return pytest.mark.parametrize(name, list(dtypes), ids=[np.dtype(d).name for d in dtypes])


def for_all_dtypes(
    name: str = "dtype", *, no_float: bool = False, no_int: bool = False, no_unsigned: bool = False
) -> pytest.MarkDecorator:
    """Every float and integer dtype a kernel takes, less the groups left out."""
    dtypes = (() if no_float else FLOAT_DTYPES) + (
        () if no_int else SIGNED_DTYPES + (() if no_unsigned else UNSIGNED_DTYPES)
    )
    return for_dtypes(dtypes, name)


def for_float_dtypes(name: str = "dtype") -> pytest.MarkDecorator:
    return for_dtypes(FLOAT_DTYPES, name)


def for_int_dtypes(name: str = "dtype", *, no_unsigned: bool = False) -> pytest.MarkDecorator:
    return for_dtypes(SIGNED_DTYPES if no_unsigned else INT_DTYPES, name)


@dataclass(frozen=True)
class Tolerance:
    """Relative tolerances per float width; the absolute one is ``rtol * scale``, ``scale`` the
    size of the terms (default: the largest magnitude of numpy's answer). Integers are exact."""

    float32: float
    float64: float

    def rtol(self, dtype: Any) -> float:
        return self.float32 if np.dtype(dtype).itemsize <= 4 else self.float64


#: per class of operation
TOLERANCES = {
    # + - * /, sqrt, casts, comparisons: correctly rounded in IEEE 754, and no backend contracts
    # or reorders them by default, so numpy's bits (the same value and sign; NaN where numpy's is)
    "exact": Tolerance(0.0, 0.0),
    # libm functions (exp, log, sin, pow, erf, ...): each libm rounds its last bits its own way
    "math": Tolerance(4e-6, 1e-13),
    # sums and other reductions in another order than numpy's (scale: the sum of the magnitudes)
    "reduction": Tolerance(1e-5, 1e-12),
    # @pk.kernel(fast_math=True): contraction into FMAs and reordering
    "fast_math": Tolerance(1e-4, 1e-10),
}


def same_values(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per entry: the same value, and for floats the same sign (of zeros and infinities) and NaN
    where numpy's is NaN (a NaN's payload is not compared)."""
    if want.dtype.kind != "f":
        return got == want
    nan = np.isnan(want)
    return (nan & np.isnan(got)) | (~nan & (got == want) & (np.signbit(got) == np.signbit(want)))


def assert_matches_numpy(
    got: np.ndarray, want: np.ndarray, op: str = "exact", scale: float | None = None, inputs: Sequence[Any] = ()
) -> None:
    """``got`` equals numpy's ``want`` within ``TOLERANCES[op]`` (integers: exactly); the message
    lists the first differing entries with their inputs."""
    if op not in TOLERANCES:
        raise ValueError(f"op must be one of {sorted(TOLERANCES)}, got {op!r}")
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    rtol = TOLERANCES[op].rtol(want.dtype) if want.dtype.kind == "f" else 0.0
    if rtol == 0.0:
        ok = same_values(got, want)
    else:
        size = float(np.nanmax(np.abs(want), initial=0.0)) if scale is None else float(scale)
        with np.errstate(invalid="ignore"):
            ok = np.isclose(got, want, rtol=rtol, atol=rtol * size, equal_nan=True)
    bad = np.argwhere(~ok)
    if bad.size:
        rows = [
            (
                tuple(int(i) for i in idx),
                *(x[idx[0]].tolist() for x in inputs),
                got[tuple(idx)].item(),
                want[tuple(idx)].item(),
            )
            for idx in bad[:12]
        ]
        raise AssertionError(f"{len(bad)} of {want.size} differ from numpy ({op}): (index, *inputs, got, numpy) {rows}")


def run_kernel(
    queue: pk.Queue,
    kernel: Any,
    inputs: Sequence[np.ndarray],
    out_like: np.ndarray,
    *,
    out_first: bool = False,
    workdiv: pk.WorkDiv | None = None,
) -> np.ndarray:
    """Launch ``kernel`` on ``queue`` over the first input's length with device copies of
    ``inputs`` and a zeroed output shaped as ``out_like``; its output, downloaded."""
    n = len(inputs[0])
    out = upload(queue, np.zeros_like(out_like))
    bufs = [upload(queue, x) for x in inputs]
    args = [out, *bufs] if out_first else [*bufs, out]
    pk.exec(queue, workdiv or pk.valid_workdiv(queue.device, n), kernel, *args, n)
    return download(queue, out)


def assert_kernel_matches_numpy(
    queue: pk.Queue,
    kernel: Any,
    numpy_fn: Callable[..., Any],
    *inputs: np.ndarray,
    op: str = "exact",
    scale: float | None = None,
    out_first: bool = False,
    workdiv: pk.WorkDiv | None = None,
) -> np.ndarray:
    """cupy's ``numpy_cupy_allclose`` for a kernel: ``numpy_fn(*inputs)`` on the host (numpy's
    floating-point warnings off: a kernel gives inf and NaN silently too) and ``kernel`` on
    ``queue`` agree within ``TOLERANCES[op]``; returns the kernel's output."""
    with np.errstate(all="ignore"):
        want = np.asarray(numpy_fn(*inputs))
    got = run_kernel(queue, kernel, inputs, want, out_first=out_first, workdiv=workdiv)
    assert_matches_numpy(got, want, op, scale, inputs)
    return got
