"""A float sum in a loop adds in the kernel's order on every backend: Intel's OpenCL CPU compiler
vectorizes such a loop over per-thread or shared arrays (a matrix product's
``s = s + x[i, p] * y[p, j]``, 5 or more terms) without fast math, adding the terms in two lanes
(``(t0 + (t1 + t3)) + (t2 + t4)``), unless the build keeps the loop scalar
(``ALPYKA_SEQUENTIAL_LOOPS``, backends/_opencl_launch.py). Each kernel's bits are checked against
the same additions in Python."""

from __future__ import annotations

import numpy as np
import pytest

import portable as pk
from alpyka_testing.kernels import download, upload

MAXN = 6
CASES = 64


@pk.kernel
def matmul_in_local(acc, a, b, out, n, cases):
    """Per case: the product of two n x n matrices copied to per-thread arrays, each element's
    sum in a ``for`` loop."""
    x = acc.local_array((MAXN, MAXN), np.float64)
    y = acc.local_array((MAXN, MAXN), np.float64)
    for c in acc.uniform_elements(cases):
        for i in range(n):
            for j in range(n):
                x[i, j] = a[c, i, j]
                y[i, j] = b[c, i, j]
        for i in range(n):
            for j in range(n):
                s = x[i, 0] * y[0, j]
                for p in range(1, n):
                    s = s + x[i, p] * y[p, j]
                out[c, i, j] = s


@pk.kernel
def matmul_in_local_while(acc, a, b, out, n, cases):
    """:func:`matmul_in_local` with each sum in a ``while`` loop."""
    x = acc.local_array((MAXN, MAXN), np.float64)
    y = acc.local_array((MAXN, MAXN), np.float64)
    for c in acc.uniform_elements(cases):
        for i in range(n):
            for j in range(n):
                x[i, j] = a[c, i, j]
                y[i, j] = b[c, i, j]
        for i in range(n):
            for j in range(n):
                s = x[i, 0] * y[0, j]
                p = 1
                while p < n:
                    s = s + x[i, p] * y[p, j]
                    p += 1
                out[c, i, j] = s


@pk.kernel
def matmul_in_shared(acc, a, b, out, n, cases):
    """Per case (one block each): the product of two n x n matrices in shared arrays, by thread 0."""
    x = acc.shared_array((MAXN, MAXN), np.float64)
    y = acc.shared_array((MAXN, MAXN), np.float64)
    for c in acc.independent_groups(cases):
        if acc.thread_idx == 0:
            for i in range(n):
                for j in range(n):
                    x[i, j] = a[c, i, j]
                    y[i, j] = b[c, i, j]
            for i in range(n):
                for j in range(n):
                    s = x[i, 0] * y[0, j]
                    for p in range(1, n):
                        s = s + x[i, p] * y[p, j]
                    out[c, i, j] = s
        acc.sync_block_threads()


def _host(a, b, n):
    """The kernels' additions, one by one, in Python's float64 (zero outside n x n)."""
    out = np.zeros(a.shape)
    for c in range(len(a)):
        for i in range(n):
            for j in range(n):
                s = float(a[c, i, 0]) * float(b[c, 0, j])
                for p in range(1, n):
                    s = s + float(a[c, i, p]) * float(b[c, p, j])
                out[c, i, j] = s
    return out


KERNELS = [matmul_in_local, matmul_in_local_while, matmul_in_shared]


@pytest.mark.parametrize("n", [4, 5, 6])
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_sum_in_a_loop_has_the_hosts_bits(queue, kernel, n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((CASES, MAXN, MAXN))
    b = rng.standard_normal((CASES, MAXN, MAXN))
    out = upload(queue, np.zeros(a.shape))
    workdiv = pk.make_workdiv(queue.device, CASES, 1)  # one thread a block: Intel's compiler vectorizes its loops
    pk.exec(queue, workdiv, kernel, upload(queue, a), upload(queue, b), out, n, CASES)
    got = download(queue, out)
    want = _host(a, b, n)
    bad = np.count_nonzero(got != want)
    assert np.array_equal(got.view(np.int64), want.view(np.int64)), f"{bad} of {n * n * CASES} sums differ"
