"""Kernels of the per-thread array tests (``acc.local_array``): 1-3 dimensions, every dtype class,
run-time indices, in/out through (nested) device functions, out-of-range indices; used by
tests/kernels/test_local_arrays.py and the CUDA/HIP compile tests."""

from __future__ import annotations

import functools

import numpy as np

import portable as pk

#: extents of the arrays below (module constants: a shape may name them)
N1 = 5
R, C = 3, 4
D0, D1, D2 = 2, 3, 2


@functools.cache
def roundtrips(dtype: type) -> tuple:
    """Kernels writing ``src[i, :]`` into a local array of ``dtype`` (1D, 2D and 3D) through
    run-time indices in reverse order, then reading it back in order into ``out[i, :]``; the last
    column of ``out`` is an element never written (zero). Returns (1D, 2D, 3D) kernels."""
    DT = dtype

    @pk.kernel
    def roundtrip_1d(acc, out, src, n):
        for i in acc.uniform_elements(n):
            a = acc.local_array(N1, DT)
            for j in range(N1 - 1):
                a[N1 - 2 - j] = src[i, N1 - 2 - j]
            for j in range(N1):
                out[i, j] = a[j]

    @pk.kernel
    def roundtrip_2d(acc, out, src, n):
        for i in acc.uniform_elements(n):
            a = acc.local_array((R, C), DT)
            for f in range(R * C - 1):
                g = R * C - 2 - f
                a[g // C, g % C] = src[i, g]
            for f in range(R * C):
                out[i, f] = a[f // C, f % C]

    @pk.kernel
    def roundtrip_3d(acc, out, src, n):
        for i in acc.uniform_elements(n):
            a = acc.local_array((D0, D1, D2), DT)
            for f in range(D0 * D1 * D2 - 1):
                g = D0 * D1 * D2 - 2 - f
                a[g // (D1 * D2), g // D2 % D1, g % D2] = src[i, g]
            for f in range(D0 * D1 * D2):
                out[i, f] = a[f // (D1 * D2), f // D2 % D1, f % D2]

    return roundtrip_1d, roundtrip_2d, roundtrip_3d


@pk.kernel
def augmented(acc, out, src, n):
    """``a[k] += ...``, ``*=``, ``-=`` with run-time ``k``; ``out[i, :] = a`` and ``len``/``.shape``."""
    for i in acc.uniform_elements(n):
        a = acc.local_array(4, np.int32)
        b = acc.local_array((2, 2), np.float64)
        for k in range(len(a)):
            a[k] += src[i] * (k + 1)
            a[k] *= 3
            a[k] -= k
        for r in range(b.shape[0]):
            for c in range(b.shape[1]):
                b[r, c] += src[i] + r
                b[r, c] *= 0.5 + c
        for k in range(4):
            out[i, k] = a[k] + b[k // 2, k % 2]


@pk.device_function
def set_row(acc, m, r, x):
    """Writes row ``r`` of the caller's matrix ``m`` (in/out)."""
    for c in range(m.shape[1]):
        m[r, c] = x * (c + 1)


@pk.device_function
def fill_rows(acc, m, x):
    """Every row of ``m`` through the nested :func:`set_row`."""
    for r in range(m.shape[0]):
        set_row(acc, m, r, x + r)


@pk.device_function
def row_sums(acc, m, sums):
    """``sums[r] = sum of row r`` (an out array), returns the total."""
    t = 0.0
    for r in range(m.shape[0]):
        s = 0.0
        for c in range(m.shape[1]):
            s += m[r, c]
        sums[r] = s
        t += s
    return t


@pk.device_function
def own_scratch(acc, x):
    """A device function with its own local array, passed on to another function."""
    m = acc.local_array((2, 3), np.float64)
    fill_rows(acc, m, x)
    s = acc.local_array(2, np.float64)
    t = row_sums(acc, m, s)
    return t + s[0] * 10.0


@pk.kernel
def through_functions(acc, out, xs, n):
    """A kernel's local array written by nested device functions, read back by the kernel."""
    for i in acc.uniform_elements(n):
        m = acc.local_array((R, C), np.float64)
        sums = acc.local_array(R, np.float64)
        fill_rows(acc, m, xs[i])
        total = row_sums(acc, m, sums)
        out[i, 0] = total
        for r in range(R):
            out[i, 1 + r] = sums[r]
        out[i, 4] = own_scratch(acc, xs[i])
        out[i, 5] = m[R - 1, C - 1]


def through_functions_reference(xs: np.ndarray) -> np.ndarray:
    """What :data:`through_functions` writes, computed with numpy."""
    out = np.zeros((len(xs), 6))
    cols = np.arange(1, C + 1)
    for i, x in enumerate(xs):
        m = np.array([(x + r) * cols for r in range(R)])
        sums = m.sum(axis=1)
        out[i, 0] = sums.sum()
        out[i, 1 : 1 + R] = sums
        m2 = np.array([(x + r) * np.arange(1, 4) for r in range(2)])
        s2 = m2.sum(axis=1)
        out[i, 4] = s2.sum() + s2[0] * 10.0
        out[i, 5] = m[R - 1, C - 1]
    return out


@pk.kernel
def declared_in_a_loop(acc, out, n):
    """Each declaration starts zeroed: a loop's second trip does not see the first trip's values."""
    for i in acc.uniform_elements(n):
        for trip in range(3):
            a = acc.local_array(3, np.int64)
            a[trip] += i + 1
            out[i, trip] = a[0] + a[1] + a[2]


@pk.kernel
def out_of_range(acc, out, n, k):
    """Reads and writes element ``k`` of a 4-element local array (out of range for k >= 4)."""
    for i in acc.uniform_elements(n):
        a = acc.local_array(4, np.float32)
        a[k] = 1.0  # CHECK
        out[i] = a[0]


@pk.device_function
def poke(acc, m, k):
    m[k, 0] = 2.0  # CHECK


@pk.kernel
def out_of_range_in_function(acc, out, n, k):
    """Element ``(k, 0)`` of a (2, 2) local array, written by a device function (out of range for
    k >= 2); reads element ``(1, 0)``."""
    for i in acc.uniform_elements(n):
        m = acc.local_array((2, 2), np.float64)
        poke(acc, m, k)
        out[i] = m[1, 0]


@pk.kernel
def constant_indices(acc, out, xs, n):
    """A 3-vector and a 2x2 matrix addressed only by constants (the numba emitter keeps them in
    scalars); bool and uint8 arrays too."""
    for i in acc.uniform_elements(n):
        v = acc.local_array(3, np.float64)
        m = acc.local_array((2, 2), np.float32)
        flags = acc.local_array(2, np.bool_)
        small = acc.local_array(1, np.uint8)
        v[0] = xs[i]
        v[1] = xs[i] * 2.0
        v[2] = v[0] + v[1]
        m[0, 0] = np.float32(v[2])
        m[1, 1] = m[0, 0] * np.float32(3)
        flags[1] = xs[i] > 2.0
        small[0] = 250
        small[0] += 10
        out[i, 0] = v[2]
        out[i, 1] = m[1, 1] + m[0, 1]
        out[i, 2] = 1.0 if flags[1] else 0.0
        out[i, 3] = 1.0 if flags[0] else 0.0
        out[i, 4] = small[0]
