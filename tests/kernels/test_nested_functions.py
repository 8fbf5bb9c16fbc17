"""A ``def`` inside a kernel or device function that reads the enclosing locals (C++'s ``[&]``
lambda): called there or passed to device functions, the values Python's closure reads, on
every backend; and the errors of what a nested def may not do."""

import numpy as np
import pytest

import portable as pk
from alpyka_testing import device_calls as dc
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelSyntaxError


def test_the_vertex_finders_lambda_as_a_nested_def(device, queue):
    rng = np.random.default_rng(5)
    n, nbins = 200, 16
    z = rng.uniform(-10, 10, n).astype(np.float32)
    izt = np.clip(((z + 10) * nbins / 20).astype(np.int32), 0, nbins - 1)
    offsets, content = pk.tools.one_to_many(queue, upload(queue, izt), nbins)
    zmax = np.float32(0.5)
    got = {}
    for kern in (dc.count_neighbours, dc.neighbours_by_lambda):  # a device function, the same as a lambda
        out = upload(queue, np.zeros(n, np.int32))
        args = (out, offsets, content, upload(queue, izt), upload(queue, z), zmax, 1, n)
        pk.exec(queue, pk.make_workdiv(device, 4, 16), kern, *args)
        got[kern.__name__] = download(queue, out)
    want = np.array(
        [
            sum(j != i and abs(int(izt[j]) - int(izt[i])) <= 1 and abs(z[j] - z[i]) <= zmax for j in range(n))
            for i in range(n)
        ]
    )
    np.testing.assert_array_equal(got["count_neighbours"], want)
    np.testing.assert_array_equal(got["neighbours_by_lambda"], want)


def test_a_nested_def_in_a_device_function(device, queue):
    n = 12
    x = np.arange(2 * n, dtype=np.float64)
    out = upload(queue, np.zeros(n))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), dc.nested_in_a_function, out, upload(queue, x), 1.5, n)
    want = [x[0] * 3 + sum(x[j] * 3 for j in range(2 * i)) for i in range(n)]
    np.testing.assert_array_equal(download(queue, out), want)


@pk.kernel
def read_when_called(acc, out, n):
    for i in acc.uniform_elements(n):

        def put(acc, j, k):
            inner = base + j

            def deeper(acc, m):  # a def in a def: reads both enclosing scopes
                out[m, k] = inner * 2 + base

            deeper(acc, j)

        base = 10 * i  # assigned after the def: read when put is called, as Python reads it
        put(acc, i, 0)
        base = 20 * i
        dc.walk_args(acc, i, i + 1, put, 1)


def _read_when_called(n):
    out = np.zeros((n, 2), np.int64)
    for i in range(n):
        for k, base in ((0, 10 * i), (1, 20 * i)):
            out[i, k] = (base + i) * 2 + base
    return out


def test_captured_values_are_read_when_called(device, queue):
    n = 9
    out = upload(queue, np.zeros((n, 2), np.int64))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), read_when_called, out, n)
    np.testing.assert_array_equal(download(queue, out), _read_when_called(n))


# ----------------------------------------------------------------------------- errors
@pk.kernel
def assigns_a_captured_name(acc, out):
    s = out[0]

    def f(acc, j):
        s += j  # noqa: F823, F841 (Python: s is f's own local here, read before it is assigned)

    f(acc, 1)


@pk.kernel
def decorated(acc, out):
    @pk.device_function
    def f(acc, j):
        out[j] = 1

    f(acc, 0)


@pk.kernel
def recursive(acc, out):
    def f(acc, j):
        if j > 0:
            f(acc, j - 1)

    f(acc, 3)


@pk.kernel
def with_defaults(acc, out):
    def f(acc, j=0):
        out[j] = 1

    f(acc, 0)


@pk.kernel
def defined_twice(acc, out):
    def f(acc, j):
        out[j] = 1

    def f(acc, j):  # noqa: F811
        out[j] = 2

    f(acc, 0)


ERRORS = [
    (assigns_a_captured_name, r"local variable 's' is used before it is assigned"),
    (decorated, r"a def inside a kernel takes no decorator"),
    (recursive, r"'f' calls itself: recursion is not allowed"),
    (with_defaults, r"'f' must take plain positional parameters"),
    (defined_twice, r"'f' is defined twice"),
]


@pytest.mark.parametrize("kern,text", ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_errors(kern, text):
    out = pk.Buffer(pk.host(), 4, np.int64)
    with pytest.raises(KernelSyntaxError, match=text) as err:
        kern.ir(kern.signature((out,)), 1, False)
    assert "test_nested_functions.py:" in str(err.value)
