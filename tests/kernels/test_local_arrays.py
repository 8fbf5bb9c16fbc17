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


@pytest.mark.alpyka_backends("cuda", "rocm")
@pytest.mark.parametrize("case", ["kernel", "device function"])
def test_out_of_range_index_is_the_emulators_bounds_check(device, queue, backend, monkeypatch, case):
    from backends.emulator import fake_cupy_kernels

    if backend not in fake_cupy_kernels.served_here() or fake_cupy_kernels.executor_name() != "cpp":
        pytest.skip(f"{backend} is not emulated as C++ here (the checks are the emulator's)")
    monkeypatch.delenv("ALPYKA_DEBUG", raising=False)
    monkeypatch.setenv("ALPYKA_EMULATE_CHECKS", "1")
    kernel, where = (la.out_of_range, la.out_of_range) if case == "kernel" else (la.out_of_range_in_function, la.poke)
    out = upload(queue, np.zeros(4, np.float32 if case == "kernel" else np.float64))
    pk.exec(queue, pk.make_workdiv(device, 1, 4), kernel, out, 4, 7)
    err = _index_error(queue)
    assert isinstance(err, pk.KernelCheckError) and err.kind == "bounds", repr(err)
    assert f"kernel {kernel.__name__!r}" in str(err), str(err)
    assert f"{os.path.basename(la.__file__)}:{_check_line(where)}" in str(err), str(err)


@pytest.mark.parametrize("name", ["constant_indices", "through_functions", "roundtrip_2d"])
def test_cuda_keeps_small_local_arrays_in_registers(name):
    """NVRTC's PTX of kernels whose local arrays have constant indices (directly, or once its
    constant loops are unrolled) has no thread-local memory (no ``.local``, no spills)."""
    from backends._c_build import CUPY_NVRTC_APPENDED, nvrtc_available, nvrtc_compile
    from backends._c_emit import emit

    if nvrtc_available() is not None:
        pytest.skip(f"NVRTC: {nvrtc_available()}")

    def h(shape, dtype):
        return pk.Buffer(pk.host(), shape, dtype)

    f64 = np.float64
    kernel, args = {
        "constant_indices": (la.constant_indices, (h((8, 5), f64), h(8, f64), 8)),
        "through_functions": (la.through_functions, (h((8, 6), f64), h(8, f64), 8)),
        "roundtrip_2d": (la.roundtrips(f64)[1], (h((8, 12), f64), h((8, 12), f64), 8)),
    }[name]
    src = emit(kernel.ir(kernel.signature(args), 1, False), "cuda", unit_elements=True)
    ptx = nvrtc_compile(src, "compute_90", CUPY_NVRTC_APPENDED)
    assert f".entry {src.entry}" in ptx and ".local" not in ptx


# ----------------------------------------------------------------------------- the numba emitter's forms
def _numba_launch(kernel, *args) -> str:
    from backends._numba_emit import emit_numba

    return emit_numba(kernel.ir(kernel.signature(args), 1, False), True).source.split("def launch")[1]


@pk.kernel
def declared_before_the_loop(acc, out, n):
    """One array for all the thread's elements: what one element leaves, the next one sees."""
    a = acc.local_array(4, np.int64)
    for i in acc.uniform_elements(n):
        a[i % 4] += 1
        out[i] = a[i % 4]


def test_numba_keeps_constant_index_arrays_in_scalars():
    """Constant indices (also once a loop of constant trips is unrolled, and through inlined
    device functions): no buffer at all; run-time indices: one buffer per launch call, zeroed
    where declared, in the flat element loop."""
    f64 = np.float64
    for kernel, args in [
        (la.constant_indices, (np.zeros((8, 5)), np.zeros(8), 8)),
        (la.through_functions, (np.zeros((8, 6)), np.zeros(8), 8)),
        (la.roundtrips(f64)[0], (np.zeros((8, 5)), np.zeros((8, 5)), 8)),
    ]:
        src = _numba_launch(kernel, *args)
        assert "np.empty" not in src and "lv_" in src, (kernel.__name__, src)
    src = _numba_launch(la.roundtrips(f64)[1], np.zeros((8, 12)), np.zeros((8, 12)), 8)  # g // C: run-time
    assert src.count("np.empty((3, 4), np.float64)") == 1 and "lv_a[:, :] = 0" in src and "for b in" not in src


@pk.kernel
def declared_in_a_branch(acc, out, n, first):
    """Declared only where ``i >= first``: an element below it sees what an earlier one left."""
    for i in acc.uniform_elements(n):
        if i >= first:
            a = acc.local_array(4, np.int64)
        a[i % 4] += 1
        out[i] = a[i % 4]


def test_the_flat_element_loop_needs_each_array_declared_in_its_body():
    from backends._grid_loop import flat_grid_loop

    k = declared_in_a_branch
    assert flat_grid_loop(k.ir(k.signature((np.zeros(4, np.int64), 4, 0)), 1, False)) is None
    k = la.roundtrips(np.float64)[1]
    assert flat_grid_loop(k.ir(k.signature((np.zeros((8, 12)), np.zeros((8, 12)), 8)), 1, False)) is not None


def test_an_array_declared_before_the_loop_is_per_thread(device, queue):
    """Not the flat element loop: the array lives across the thread's elements."""
    from backends._grid_loop import flat_grid_loop

    k = declared_before_the_loop
    assert flat_grid_loop(k.ir(k.signature((np.zeros(4, np.int64), 4)), 1, False)) is None
    n = 24
    out = upload(queue, np.zeros(n, np.int64))
    wd = pk.WorkDiv(2, 1, 6) if device.backend_name.startswith("cpu") else pk.WorkDiv(2, 2, 3)
    pk.exec(queue, wd, k, out, n)
    got = download(queue, out)
    per_thread = wd.elements[0]
    want = np.zeros(n, np.int64)
    for t in range(wd.blocks[0] * wd.threads[0]):  # thread t's elements: uniform_elements' order
        counts = np.zeros(4, np.int64)
        for i in range(n):
            if (i // per_thread) % (wd.blocks[0] * wd.threads[0]) == t:
                counts[i % 4] += 1
                want[i] = counts[i % 4]
    np.testing.assert_array_equal(got, want)


def test_triangular_loops_through_a_device_function(device, queue):
    """A Cholesky factor: loops whose bounds depend on outer variables, a matrix passed in and
    another out; the same bits as the same operations in Python. The numba emitter unrolls it all
    (inner bounds become constants once the outer loop is unrolled) and keeps both in scalars."""
    n = 17
    xs = np.linspace(0.0, 4.0, n)
    out = upload(queue, np.zeros((n, 9)))
    pk.exec(queue, pk.make_workdiv(device, 2, 4), la.cholesky_3x3, out, upload(queue, xs), n)
    np.testing.assert_array_equal(download(queue, out), la.cholesky_reference(xs))
    if device.backend_name == "cpu_serial":
        assert "np.empty" not in _numba_launch(la.cholesky_3x3, np.zeros((4, 9)), np.zeros(4), 4)
