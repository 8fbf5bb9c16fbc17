"""Kernels whose device functions return several values (``return a, b``), shared by
tests/kernels/test_device_function_results.py (run on every backend) and the device compilers'
tests (tests/backends/test_nvrtc.py, test_hip_compile.py)."""

import numpy as np

import portable as pk


@pk.device_function
def floor_divmod(a, b):
    assert b != 0, "floor_divmod by 0"
    q = a // b
    return q, a - q * b


@pk.device_function
def running_stats(acc, x, n):
    """(sum, max, 1 where the sum passed 1000 and it stopped early): a return inside a loop."""
    s = 0.0
    m = x[0]
    for i in range(n):
        s += x[i]
        if x[i] > m:
            m = x[i]
        if s > 1000:
            return s, m, True
    return s, m, False


@pk.device_function
def widened(v):
    """Position 0 is int64 on one return and float64 on the other: float64 for both."""
    if v < 0:
        return 0, np.float32(v)
    return v * 0.5, np.float32(v)


@pk.device_function
def forwarded(acc, x, n):
    return running_stats(acc, x, n)  # several values passed on as they are


@pk.device_function
def swapped(a, b):
    return b, a


@pk.device_function
def counted(acc, counter, v):
    """Values nobody reads, and a side effect that must still happen."""
    acc.atomic_add(counter, 0, 1)
    return v, v + 1


@pk.kernel
def several_values(acc, out, counter, x, n):
    for i in acc.uniform_elements(n):
        q, r = floor_divmod(x[i], 7)
        out[i, 0] = q
        out[i, 1] = r
        s, m, early = running_stats(acc, x, i + 1)
        out[i, 2] = s
        out[i, 3] = m
        out[i, 4] = 1 if early else 0
        w = widened(x[i] - 50)  # a name for both values: w[0], w[1]
        out[i, 5] = w[0] + w[1]
        out[i, 6], out[i, 7] = floor_divmod(x[i], 3)  # straight into array elements
        fs, fm, fe = forwarded(acc, x, n)
        out[i, 9] = fs + fm + fe
        a = x[i]
        b = 1
        for _k in range(3):
            a, b = swapped(a, b + a)  # the arguments read before the results are assigned
        out[i, 8] = a * 1000 + b
        counted(acc, counter, x[i])


@pk.device_function
def scaled_pair(s, c, k):
    return s * k, c * k


@pk.device_function
def rotate(acc, x, y, s, c):
    s2, c2 = scaled_pair(s, c, np.float32(2))
    return x * c2 - y * s2, x * s2 + y * c2


@pk.kernel
def rotate_points(acc, xs, ys, s, c, n):
    for i in acc.uniform_elements(n):
        xs[i], ys[i] = rotate(acc, xs[i], ys[i], s, c)


@pk.kernel
def divide_all(acc, out, x, d, n):
    for i in acc.uniform_elements(n):
        q, r = floor_divmod(x[i], d)
        out[i] = q * 10 + r


# ----------------------------------------------------------------------------- functions as arguments
@pk.device_function
def add_to(acc, j, out, i):
    out[i] += j


@pk.device_function
def count_to(acc, j, out, i):
    out[i] += 1


@pk.device_function
def walk(acc, lo, hi, fn, out, i):
    """``fn(acc, j, out, i)`` for ``j`` in ``[lo, hi)``: specialised per ``fn`` passed."""
    for j in range(lo, hi):
        fn(acc, j, out, i)


@pk.device_function
def walk_twice(acc, hi, fn, *args):
    """``*args`` passed on as they are, through a second level."""
    walk(acc, 0, hi, fn, *args)
    walk(acc, hi, 2 * hi, fn, *args)


@pk.kernel
def sums_and_counts(acc, sums, counts, x, n):
    for i in acc.uniform_elements(n):
        walk(acc, 0, x[i], add_to, sums, i)
        walk_twice(acc, x[i], count_to, counts, i)


def walker_kernel(fn):
    """A kernel of the same source and name for every ``fn``: only the function it passes differs."""

    @pk.kernel
    def apply_walk(acc, out, n):
        for i in acc.uniform_elements(n):
            walk(acc, 0, i, fn, out, i)

    return apply_walk


def scaled_visitor(k):
    """Device functions of the same name and source, ``k`` baked in."""

    @pk.device_function
    def visit(acc, j, out, i):
        out[i] += j * k

    return visit


# ----------------------------------------------------------------------------- for_each_in_bins
@pk.device_function
def close_pair(acc, j, i, z, zmax, out):
    """CMSSW's vertex finder's lambda: count the neighbours j of i within zmax (i itself left out)."""
    if j != i and abs(z[j] - z[i]) <= zmax:
        out[i] += 1


@pk.kernel
def count_neighbours(acc, out, offsets, content, izt, z, zmax, window, n):
    hist = (offsets, content)
    for i in acc.uniform_elements(n):
        pk.tools.for_each_in_bins(acc, hist, izt[i], window, close_pair, i, z, zmax, out)
