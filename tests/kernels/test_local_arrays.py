"""Per-thread arrays (``acc.local_array``) on every backend: 1-3 dimensions, every dtype class,
run-time indices, augmented assignment, in/out through nested device functions, zero at each
declaration, range checks (ALPYKA_DEBUG and the GPU emulator's "bounds"), and the shapes refused."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import portable as pk
from alpyka_testing import local_arrays as la
from alpyka_testing.kernels import download, upload
from portable.compiler import KernelIndexError, KernelSyntaxError

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
DTYPES += [np.float32, np.float64]
SIZES = (la.N1, la.R * la.C, la.D0 * la.D1 * la.D2)


def _values(dtype, n: int, m: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype is np.bool_:
        return rng.integers(0, 2, (n, m)).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, (n, m), dtype=dtype, endpoint=True)
    return rng.standard_normal((n, m)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_roundtrip_through_run_time_indices(device, queue, dtype, dims):
    kernel = la.roundtrips(dtype)[dims - 1]
    n, m = 37, SIZES[dims - 1]
    src = _values(dtype, n, m)
    out = upload(queue, np.ones((n, m), dtype))
    pk.exec(queue, pk.make_workdiv(device, 3, 4), kernel, out, upload(queue, src), n)
    want = src.copy()
    want[:, -1] = 0  # never written: zero from the declaration
    np.testing.assert_array_equal(download(queue, out), want)


def test_augmented_assignment_len_and_shape(device, queue):
    n = 20
    src = np.arange(n, dtype=np.int32) - 7
    out = upload(queue, np.zeros((n, 4), np.float64))
    pk.exec(queue, pk.make_workdiv(device, 2, 8), la.augmented, out, upload(queue, src), n)
    k = np.arange(4)
    a = (src[:, None] * (k + 1)) * 3 - k
    b = (src[:, None] + k // 2) * (0.5 + k % 2)
    np.testing.assert_array_equal(download(queue, out), a + b)


def test_in_out_through_nested_device_functions(device, queue):
    n = 25
    xs = np.linspace(-2.0, 3.0, n)
    out = upload(queue, np.zeros((n, 6)))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), la.through_functions, out, upload(queue, xs), n)
    np.testing.assert_array_equal(download(queue, out), la.through_functions_reference(xs))


def test_each_declaration_starts_at_zero(device, queue):
    n = 9
    out = upload(queue, np.full((n, 3), -1, np.int64))
    pk.exec(queue, pk.make_workdiv(device, 1, 16), la.declared_in_a_loop, out, n)
    np.testing.assert_array_equal(download(queue, out), np.repeat(np.arange(1, n + 1)[:, None], 3, axis=1))


def test_constant_indices_every_type(device, queue):
    n = 6
    xs = np.arange(n, dtype=np.float64)
    out = upload(queue, np.zeros((n, 5)))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), la.constant_indices, out, upload(queue, xs), n)
    want = np.stack(
        [3 * xs, (np.float32(3 * xs) * np.float32(3)).astype(np.float64), xs > 2, 0 * xs, np.full(n, 4.0)], axis=1
    )
    np.testing.assert_array_equal(download(queue, out), want)


def _check_line(kernel) -> int:
    lines, first = inspect.getsourcelines(kernel.py_function)
    return next(first + i for i, text in enumerate(lines) if "# CHECK" in text)


def _index_error(queue) -> KernelIndexError:
    with pytest.raises(pk.AsyncError) as info:
        queue.wait()
    err = info.value.__cause__
    assert isinstance(err, KernelIndexError), repr(err)
    return err


@pytest.mark.parametrize("case", ["kernel", "device function"])
def test_out_of_range_index_is_caught_under_debug(device, queue, monkeypatch, case):
    monkeypatch.setenv("ALPYKA_DEBUG", "1")
    kernel, where = (la.out_of_range, la.out_of_range) if case == "kernel" else (la.out_of_range_in_function, la.poke)
    out = upload(queue, np.zeros(4, np.float32 if case == "kernel" else np.float64))
    pk.exec(queue, pk.make_workdiv(device, 1, 4), kernel, out, 4, 2 if case == "kernel" else 1)
    np.testing.assert_array_equal(download(queue, out), np.full(4, 0.0 if case == "kernel" else 2.0))
    pk.exec(queue, pk.make_workdiv(device, 1, 4), kernel, out, 4, 4 if case == "kernel" else 2)
    msg = str(_index_error(queue))
    assert f"{os.path.basename(la.__file__)}:{_check_line(where)}" in msg, msg
    label = "local array 'a'" if case == "kernel" else "array parameter 'm' of device function 'poke'"
    assert label in msg, msg
    pk.exec(queue, pk.make_workdiv(device, 1, 4), kernel, out, 4, -1)
    assert "index out of range" in str(_index_error(queue))


# ----------------------------------------------------------------------------- refused at compile time
def _refused(source: str, tmp_path, match: str) -> str:
    """Compile ``source`` (a kernel ``k(acc, out)``, written to a file) for cpu_serial; the
    KernelSyntaxError it must raise, matched against ``match``."""
    path = tmp_path / "bad_local.py"
    path.write_text("import numpy as np\nimport portable as pk\nBIG = 5000\nTHREE = 3\n\n@pk.kernel\n" + source)
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    k = ns["k"]
    out = np.zeros(4)
    with pytest.raises(KernelSyntaxError, match=match) as info:
        k.ir(k.signature((out, 3)), 1, False)
    assert "bad_local.py:" in str(info.value)
    return str(info.value)


BAD = {
    "run-time": ("a = acc.local_array(n, np.float64)", r"run-time int64 value.*fixed when the kernel compiles"),
    "negative": ("a = acc.local_array(-2, np.float64)", r"extent -2 is not positive"),
    "zero": ("a = acc.local_array((THREE, 0), np.float64)", r"extent 0 is not positive"),
    "float": ("a = acc.local_array(2.5, np.float64)", r"the shape has a float64 number \(2.5\)"),
    "4 dims": ("a = acc.local_array((2, 2, 2, 2), np.float64)", r"4 dimensions"),
    "too large": ("a = acc.local_array((BIG,), np.float64)", r"40000 bytes, more than the 16384"),
    "too large together": (
        "a = acc.local_array((1000, 2), np.float32)\n    b = acc.local_array((BIG // 4, 2), np.float32)",
        r"18000 bytes, more than the 16384",
    ),
    "dtype": ("a = acc.local_array(3, 4)", r"dtype must be a numpy type"),
    "in an expression": ("out[0] = acc.local_array(3, np.float64)[0]", r"assign acc.local_array\(shape, dtype\)"),
    "atomic": ("a = acc.local_array(3, np.int32)\n    acc.atomic_add(a, 0, 1)", r"no atomics on thread-local"),
    "constant past the end": ("a = acc.local_array((THREE, 2), np.int32)\n    a[THREE, 0] = 1", r"index 3"),
    "negative constant": ("a = acc.local_array(3, np.int32)\n    a[-1] = 1", r"negative index -1"),
    "reshaped": (
        "a = acc.local_array(3, np.int32)\n    a = acc.local_array(4, np.int32)",
        r"declared twice with different shapes",
    ),
    "a number before": ("a = 1\n    a = acc.local_array(3, np.int32)", r"holds a number and cannot become"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_declarations_are_refused(case, tmp_path):
    body, match = BAD[case]
    _refused(f"def k(acc, out, n):\n    {body}\n", tmp_path, match)
