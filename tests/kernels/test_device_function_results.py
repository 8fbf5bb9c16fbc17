"""Device functions that return several values (``return a, b``, unpacked by the caller): the
same values as numpy on every backend (the numba inliner, out-pointers on OpenCL/CUDA/HIP), and
the compile-time errors of returns that disagree or of several values used as one number."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing.device_calls import divide_all, floor_divmod, rotate_points, several_values, swapped
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError


def _reference(x):
    n = len(x)
    out = np.zeros((n, 10))
    for i, v in enumerate(x):
        out[i, 0], out[i, 1] = v // 7, v % 7
        s, m, early = 0.0, x[0], False
        for j in range(i + 1):
            s += x[j]
            m = max(m, x[j])
            if s > 1000:
                early = True
                break
        out[i, 2:5] = s, m, early
        w = v - 50
        out[i, 5] = (0 if w < 0 else w * 0.5) + np.float32(w)
        out[i, 6], out[i, 7] = v // 3, v % 3
        a, b = v, 1
        for _ in range(3):
            a, b = b + a, a
        out[i, 8] = a * 1000 + b
        s, m, early = 0.0, x[0], False
        for v2 in x:
            s += v2
            m = max(m, v2)
            if s > 1000:
                early = True
                break
        out[i, 9] = s + m + early
    return out


def test_several_values_on_every_backend(device, queue):
    rng = np.random.default_rng(7)
    n = 97
    x = rng.integers(-40, 120, n).astype(np.int64)
    out = pk.Buffer(device, (n, 10), np.float64)
    counter = upload(queue, np.zeros(1, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 3, 8), several_values, out, counter, upload(queue, x), n)
    np.testing.assert_array_equal(download(queue, out), _reference(x))
    assert download(queue, counter)[0] == n  # the call whose values nobody read still ran


def test_float_results_have_numpys_bits(device, queue):
    """float32 in, float32 out through two levels of calls: numpy's bits (no FMA anywhere)."""
    rng = np.random.default_rng(3)
    n = 200
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    s, c = np.float32(0.3), np.float32(0.9)
    xb, yb = upload(queue, x), upload(queue, y)
    pk.exec(queue, pk.make_workdiv(device, 4, 16), rotate_points, xb, yb, s, c, n)
    s2, c2 = s * np.float32(2), c * np.float32(2)
    np.testing.assert_array_equal(download(queue, xb), x * c2 - y * s2)
    np.testing.assert_array_equal(download(queue, yb), x * s2 + y * c2)


def test_a_failed_assert_in_a_function_returning_several_values(device, queue):
    """The C backends leave such a function through its out-pointers (zeroed) and report the
    assertion: KernelAssertionError at the wait, as from any device function."""
    x = upload(queue, np.arange(8, dtype=np.int64))
    out = upload(queue, np.zeros(8, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), divide_all, out, x, 0, 8)
    with pytest.raises(pk.AsyncError) as err:
        queue.wait()
    assert isinstance(err.value.__cause__, pk.KernelAssertionError), repr(err.value.__cause__)
    assert "floor_divmod by 0" in str(err.value.__cause__)
    pk.exec(queue, pk.make_workdiv(device, 2, 4), divide_all, out, x, 3, 8)
    queue.wait()
    np.testing.assert_array_equal(download(queue, out), np.arange(8) // 3 * 10 + np.arange(8) % 3)


# ----------------------------------------------------------------------------- errors
@pk.device_function
def two_or_three(v):
    if v > 0:
        return v, v
    return v, v, v


@pk.device_function
def one_or_two(v):
    if v > 0:
        return v
    return v, v


@pk.device_function
def nothing_returned(v):
    return ()


@pk.device_function
def nested_tuple(v):
    return v, (v, v)


@pk.kernel
def uses_arity_mismatch(acc, out):
    a, b = two_or_three(out[0])
    out[0] = a + b


@pk.kernel
def uses_scalar_and_tuple(acc, out):
    a, b = one_or_two(out[0])
    out[0] = a


@pk.kernel
def uses_empty(acc, out):
    nothing_returned(out[0])


@pk.kernel
def uses_nested(acc, out):
    a, b = nested_tuple(out[0])


@pk.kernel
def as_a_number(acc, out):
    out[0] = floor_divmod(out[0], 2) + 1


@pk.kernel
def indexed_directly(acc, out):
    out[0] = floor_divmod(out[0], 2)[0]


@pk.kernel
def augmented(acc, out):
    s = 0
    s += floor_divmod(out[0], 2)


@pk.kernel
def passed_on(acc, out):
    out[0] = swapped(floor_divmod(out[0], 2), 1)[0]


@pk.kernel
def too_many_names(acc, out):
    a, b, c = floor_divmod(out[0], 2)


@pk.kernel
def in_a_condition(acc, out):
    if floor_divmod(out[0], 2):
        out[0] = 1


ERRORS = [
    (uses_arity_mismatch, r"this return gives 3 values, the return at line \d+ 2 values: every return"),
    (uses_scalar_and_tuple, r"this return gives 2 values, the return at line \d+ one value"),
    (uses_empty, r"'return \(\)' gives none"),
    (uses_nested, r"each value a device function returns is a number"),
    (
        as_a_number,
        r"the 2 values \(int64, int64\) that device function 'floor_divmod' returns; "
        r"unpack them first \(a, b = floor_divmod\(\.\.\.\)\)",
    ),
    (indexed_directly, r"cannot index the 2 values .* unpack them first"),
    (augmented, r"unpack them first \(a, b = floor_divmod"),
    (passed_on, r"unpack them first"),
    (too_many_names, r"cannot unpack a tuple of 2 into 3 names"),
    (in_a_condition, r"unpack them first"),
]


@pytest.mark.parametrize("kern,text", ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_errors_name_the_rule_and_the_fix(kern, text):
    out = pk.Buffer(pk.host(), 4, np.int64)
    with pytest.raises(KernelSyntaxError, match=text) as err:
        kern.ir(kern.signature((out,)), 1, False)
    assert "test_device_function_results.py:" in str(err.value)
